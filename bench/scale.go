package bench

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
)

// queryTimeout bounds each overview and list call of the scale row.
const queryTimeout = 2 * time.Second

// runScale measures row 5: many one-task jobs running at once (bench-block
// tasks, which run until canceled) on 40 TaskExecutors in one JobManager,
// in runs on a fresh cluster each (see scaleRun); every figure is one per
// run.
func runScale(ctx context.Context, e *env) (Outcome, error) {
	tes, jobs := pick(e, 40, 4), pick(e, 10_000, 500)
	name := fmt.Sprintf("%d one-task jobs running, %dx%d slots", jobs, tes, jobs/tes)
	var rs []scaleResult
	for run := range e.runs() {
		e.progress("5: run %d of %d", run+1, e.runs())
		r, err := scaleRun(ctx, e, tes, jobs)
		if err != nil {
			return Outcome{}, err
		}
		rs = append(rs, r)
	}
	// each is one figure of every run; noted, the runs' notes that are
	// set, each tagged with its run, or fallback if none is.
	each := func(f func(scaleResult) float64) Spread {
		xs := make([]float64, 0, len(rs))
		for _, r := range rs {
			xs = append(xs, f(r))
		}
		return SpreadOf(xs)
	}
	noted := func(f func(scaleResult) string, fallback string) string {
		var out []string
		for i, r := range rs {
			if n := f(r); n != "" {
				out = append(out, fmt.Sprintf("run %d: %s", i+1, n))
			}
		}
		if len(out) == 0 {
			return fallback
		}
		return strings.Join(out, "; ")
	}
	queries := 0
	var failed []float64
	for _, r := range rs {
		queries += r.queries
		if r.failed >= 0 {
			failed = append(failed, float64(r.failed))
		}
	}
	queryNote := fmt.Sprintf("%d calls", queries)
	if failures := noted(func(r scaleResult) string { return r.queryFailure }, ""); failures != "" {
		queryNote += "; failed calls count with their duration: " + failures
	}
	failNote := noted(func(r scaleResult) string { return r.failNote },
		"in every run every task kept running through the steady state, one task start per acknowledged job, and the JobManager kept its leadership")
	if len(failed) < len(rs) {
		failNote += fmt.Sprintf("; the overview did not answer in %d runs", len(rs)-len(failed))
	}
	windows, window := scaleWindows(e)
	waitNote := fmt.Sprintf("per run the median of %d windows of %v, as many jobs waiting as running, no client calls", windows, window)
	if odd := noted(func(r scaleResult) string { return r.waitNote }, ""); odd != "" {
		waitNote += "; " + odd
	}
	median := func(f func(scaleResult) float64) float64 { return each(f).Median }
	reachNote := noted(func(r scaleResult) string { return r.reachNote },
		fmt.Sprintf("all %d running in every run, a median %.1f s after the first submission (acks took %.1f s)",
			jobs, median(func(r scaleResult) float64 { return r.reachSecs }), median(func(r scaleResult) float64 { return r.ackSecs })))
	cancelNote := noted(func(r scaleResult) string { return r.cancelNote }, "in every run every cancel call was answered and all tasks stopped")
	rows := []Row{
		{ID: "5", Scenario: name, Measure: "jobs running", Value: each(func(r scaleResult) float64 { return float64(r.reached) }), Target: fmt.Sprint(jobs), Note: reachNote},
		{ID: "5", Scenario: name, Measure: "JM CPU cores", Value: each(func(r scaleResult) float64 { return r.cores }), Target: "< 1",
			Note: fmt.Sprintf("per run the median of %d windows of %v, no queries; the bench process (TaskExecutors) used %.2f cores", windows, window, median(func(r scaleResult) float64 { return r.selfCores }))},
		{ID: "5", Scenario: name, Measure: "JM RSS MiB", Value: each(func(r scaleResult) float64 { return r.rssMiB }), Target: "< 1024",
			Note: fmt.Sprintf("%.0f MiB before the first job", median(func(r scaleResult) float64 { return r.baseRSSMiB }))},
		{ID: "5", Scenario: name, Measure: "RPCs/s JM⇄TEs", Value: each(func(r scaleResult) float64 { return r.rpcs }),
			Note: fmt.Sprintf("per second: TE→JM %.0f, JM→TE %.0f, TE→HA store %.0f", median(func(r scaleResult) float64 { return r.toJM }),
				median(func(r scaleResult) float64 { return r.fromJM }), median(func(r scaleResult) float64 { return r.toStore }))},
		{ID: "5", Scenario: name, Measure: "GetClusterOverview p50 ms", Value: each(func(r scaleResult) float64 { return r.ovP50 }), Target: "≤ 10", Note: queryNote},
		{ID: "5", Scenario: name, Measure: "GetClusterOverview p99 ms", Value: each(func(r scaleResult) float64 { return r.ovP99 }), Target: "≤ 10"},
		{ID: "5", Scenario: name, Measure: "ListJobs(100) p50 ms", Value: each(func(r scaleResult) float64 { return r.lsP50 }), Target: "≤ 10"},
		{ID: "5", Scenario: name, Measure: "ListJobs(100) p99 ms", Value: each(func(r scaleResult) float64 { return r.lsP99 }), Target: "≤ 10"},
		{ID: "5", Scenario: name, Measure: "jobs FAILED", Value: SpreadOf(failed), Target: "0", Note: failNote},
		{ID: "5", Scenario: name, Measure: fmt.Sprintf("JM CPU cores, +%d waiting", jobs), Value: each(func(r scaleResult) float64 { return r.waitCores }), Target: "< 1", Note: waitNote},
		{ID: "5", Scenario: name, Measure: fmt.Sprintf("JM RSS MiB, +%d waiting", jobs), Value: each(func(r scaleResult) float64 { return r.waitRSSMiB })},
		{ID: "5", Scenario: name, Measure: "cancel all s", Value: each(func(r scaleResult) float64 { return r.cancelTook.Seconds() }), Note: cancelNote},
	}
	return Outcome{Rows: rows}, nil
}

// scaleWindows is the number and length of row 5's measuring windows.
func scaleWindows(e *env) (int, time.Duration) { return 3, pick(e, 3*time.Second, time.Second) }

// scaleResult is what one run of row 5 measured.
type scaleResult struct {
	reached                    int64
	reachSecs, ackSecs         float64 // until all ran, until all were acknowledged
	reachNote                  string  // set if not all ran
	cores, selfCores, rpcs     float64 // medians over the windows
	toJM, fromJM, toStore      float64
	baseRSSMiB, rssMiB         float64
	ovP50, ovP99, lsP50, lsP99 float64 // over all of the run's calls
	queries                    int
	queryFailure               string // how many calls failed and the first error; empty if none
	failed                     int    // from the overview; -1 if it did not answer
	failNote                   string // set if tasks stopped, ran again, or the leadership was lost
	waitCores, waitRSSMiB      float64
	waitNote                   string // set if the waiting phase was not as planned
	cancelTook                 time.Duration
	cancelNote                 string // set if not all stopped, or not all cancels were answered
}

// scaleRun is one run of row 5 on a fresh cluster of tes TaskExecutors
// with jobs slots in all. Phases, each bounded: submit jobs jobs and wait
// until all run (or the bound passes: the run reports how many ran); at
// steady state the JobManager's CPU and the RPCs between it and the
// TaskExecutors, in windows with no other load; then the latency of
// GetClusterOverview and ListJobs (page size 100) from one client;
// whether any job FAILED; then as many jobs again, which wait for slots,
// and the JobManager's CPU beside them; then cancel all.
func scaleRun(ctx context.Context, e *env, tes, jobs int) (scaleResult, error) {
	var r scaleResult
	reachBound := pick(e, 75*time.Second, 20*time.Second)
	windows, window := scaleWindows(e)
	queryWindow := time.Second
	cancelBound := pick(e, 30*time.Second, 15*time.Second)

	e.progress("5: starting %d TaskExecutors of %d slots", tes, jobs/tes)
	c, err := startCluster(ctx, e, tes, jobs/tes, false)
	if err != nil {
		return r, err
	}
	defer c.stop()
	pid := c.jm.PID()
	baseRSS, _ := RSSBytes(pid)
	r.baseRSSMiB = float64(baseRSS) / (1 << 20)

	// Submit every job, and wait until all run, within reachBound.
	t0 := time.Now()
	rctx, cancel := context.WithDeadline(ctx, t0.Add(reachBound))
	ids := make([]string, jobs)
	for i := range ids {
		ids[i] = fmt.Sprintf("run-%d", i)
	}
	graph := OneTaskGraph(InvokableBlock)
	acked, firstErr := forEach(rctx, ids, func(ctx context.Context, c jobplanev1connect.DispatcherServiceClient, id string) error {
		_, err := c.SubmitJob(ctx, &jobplanev1.SubmitJobRequest{JobId: id, JobGraph: graph})
		return err
	}, c.jm.URL)
	submitted := time.Since(t0)
	for c.rec.Running() < int64(jobs) && rctx.Err() == nil {
		select {
		case <-rctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
	cancel()
	reached, reachTime := c.rec.Running(), time.Since(t0)
	e.progress("5: %d acknowledged in %v, %d running after %v", len(acked), submitted.Round(time.Millisecond), reached, reachTime.Round(time.Millisecond))
	if ctx.Err() != nil {
		return r, ctx.Err()
	}
	if reached == 0 {
		return r, fmt.Errorf("no job ran within %v (%d acknowledged; first error: %v)", reachBound, len(acked), firstErr)
	}
	r.reached, r.reachSecs, r.ackSecs = reached, reachTime.Seconds(), submitted.Seconds()
	if reached < int64(jobs) {
		r.reachNote = fmt.Sprintf("only %d of %d running after %.0f s, when %d submissions were acknowledged (first error: %v); measured from there, as deployment goes on", reached, jobs, reachBound.Seconds(), len(acked), firstErr)
	}

	// Steady state: the JobManager's CPU and the RPCs, no other load.
	meter, err := NewCPUMeter(pid)
	if err != nil {
		return r, err
	}
	self, err := NewCPUMeter(os.Getpid())
	if err != nil {
		return r, err
	}
	var cores, rpcs, toJM, fromJM, toStore []float64
	minRunning := reached
	for range windows {
		a, b, s := c.tes.Calls.ToJobManager.Load(), c.tes.Calls.FromJobManager.Load(), c.tes.Calls.ToStore.Load()
		tw := time.Now()
		if err := sleep(ctx, window); err != nil {
			return r, err
		}
		x, err := meter.Cores()
		if err != nil {
			return r, fmt.Errorf("jobmanager gone: %w", err)
		}
		secs := time.Since(tw).Seconds()
		da, db, ds := c.tes.Calls.ToJobManager.Load()-a, c.tes.Calls.FromJobManager.Load()-b, c.tes.Calls.ToStore.Load()-s
		minRunning = min(minRunning, c.rec.Running())
		cores = append(cores, x)
		rpcs = append(rpcs, float64(da+db+ds)/secs)
		toJM, fromJM, toStore = append(toJM, float64(da)/secs), append(fromJM, float64(db)/secs), append(toStore, float64(ds)/secs)
	}
	r.selfCores, _ = self.Cores()
	r.cores, r.rpcs = Median(cores), Median(rpcs)
	r.toJM, r.fromJM, r.toStore = Median(toJM), Median(fromJM), Median(toStore)
	rss, err := RSSBytes(pid)
	if err != nil {
		return r, fmt.Errorf("jobmanager gone: %w", err)
	}
	r.rssMiB = float64(rss) / (1 << 20)

	// Query latency, one client, a call every 10ms. A call that fails
	// (at the latest after queryTimeout) counts with the time it took, a
	// lower bound of its latency.
	var ov, ls []time.Duration
	var queryFailures int
	var queryErr error
	timed := func(call func(context.Context) error) time.Duration {
		cctx, cancel := context.WithTimeout(ctx, queryTimeout)
		defer cancel()
		t := time.Now()
		err := call(cctx)
		r.queries++
		if err != nil {
			queryFailures++
			queryErr = err
		}
		return time.Since(t)
	}
	end := time.Now().Add(time.Duration(windows) * queryWindow)
	for time.Now().Before(end) && ctx.Err() == nil {
		ov = append(ov, timed(func(ctx context.Context) error {
			_, err := c.jm.Dispatcher.GetClusterOverview(ctx, &jobplanev1.GetClusterOverviewRequest{})
			return err
		}))
		ls = append(ls, timed(func(ctx context.Context) error {
			_, err := c.jm.Dispatcher.ListJobs(ctx, &jobplanev1.ListJobsRequest{PageSize: 100})
			return err
		}))
		_ = sleep(ctx, 10*time.Millisecond)
	}
	if ctx.Err() != nil {
		return r, ctx.Err()
	}
	minRunning = min(minRunning, c.rec.Running())
	r.ovP50, r.ovP99, r.lsP50, r.lsP99 = LatencyMs(ov, 50), LatencyMs(ov, 99), LatencyMs(ls, 50), LatencyMs(ls, 99)
	if queryFailures > 0 {
		r.queryFailure = fmt.Sprintf("%d of %d calls failed (first: %v)", queryFailures, r.queries, queryErr)
	}
	// Whether a job FAILED, from the overview.
	stillRunning, starts := c.rec.Running(), c.rec.Blocked()
	r.failed = -1
	if ov, err := c.overview(ctx); err == nil {
		r.failed = int(ov.GetFailedJobCount())
	}
	if stillRunning != reached || minRunning != reached || starts != int64(len(acked)) {
		r.failNote = fmt.Sprintf("%d tasks running at the end of the steady state (%d at its start, fewest %d in between); %d task starts for %d acknowledged jobs",
			stillRunning, reached, minRunning, starts, len(acked))
	}

	// As many jobs again, which wait for slots: every slot is taken. A
	// waiting job holds no timer and no loop, so the JobManager's CPU at
	// steady state stays what the running jobs cost.
	waitIDs := make([]string, jobs)
	for i := range waitIDs {
		waitIDs[i] = fmt.Sprintf("wait-%d", i)
	}
	wctx, wcancel := context.WithTimeout(ctx, reachBound)
	waiting, waitErr := forEach(wctx, waitIDs, func(ctx context.Context, c jobplanev1connect.DispatcherServiceClient, id string) error {
		_, err := c.SubmitJob(ctx, &jobplanev1.SubmitJobRequest{JobId: id, JobGraph: graph})
		return err
	}, c.jm.URL)
	wcancel()
	e.progress("5: %d more acknowledged, waiting for slots (first error: %v)", len(waiting), waitErr)
	// Let the JobManager finish what the submissions started before
	// measuring.
	settleBound := pick(e, 10*time.Second, 3*time.Second)
	busy := c.settle(ctx, settleBound)
	if _, err := meter.Cores(); err != nil { // restarts the meter
		return r, fmt.Errorf("jobmanager gone: %w", err)
	}
	var waitCores []float64
	for range windows {
		if err := sleep(ctx, window); err != nil {
			return r, err
		}
		x, err := meter.Cores()
		if err != nil {
			return r, fmt.Errorf("jobmanager gone: %w", err)
		}
		waitCores = append(waitCores, x)
	}
	waitRSS, _ := RSSBytes(pid)
	r.waitCores, r.waitRSSMiB = Median(waitCores), float64(waitRSS)/(1<<20)
	var odd []string
	if busy >= 0.1 {
		odd = append(odd, fmt.Sprintf("the JobManager still used %.2f cores %v after the submissions", busy, settleBound))
	}
	if len(waiting) < jobs {
		odd = append(odd, fmt.Sprintf("only %d of %d waiting jobs acknowledged within %v (first error: %v)", len(waiting), jobs, reachBound, waitErr))
	}
	if running := c.rec.Running(); running != reached {
		odd = append(odd, fmt.Sprintf("%d running beside them, not %d", running, reached))
	}
	r.waitNote = strings.Join(odd, ", ")
	if lost := c.leadershipNote(ctx); lost != "" {
		r.failNote = strings.TrimPrefix(r.failNote+"; "+lost, "; ")
	}

	// Cancel all, bounded.
	tc := time.Now()
	cctx, ccancel := context.WithTimeout(ctx, cancelBound)
	// The waiting jobs first, so that no slot a running job frees is
	// given to one of them.
	canceled, cancelErr := forEach(cctx, append(waiting, acked...), func(ctx context.Context, c jobplanev1connect.DispatcherServiceClient, id string) error {
		_, err := c.CancelJob(ctx, &jobplanev1.CancelJobRequest{JobId: id})
		return err
	}, c.jm.URL)
	for c.rec.Running() > 0 && cctx.Err() == nil {
		_ = sleep(cctx, 50*time.Millisecond)
	}
	ccancel()
	r.cancelTook = time.Since(tc)
	switch left := c.rec.Running(); {
	case left > 0:
		r.cancelNote = fmt.Sprintf("%d tasks still running %.0f s after the first cancel (%d calls answered, first error %v)", left, cancelBound.Seconds(), len(canceled), cancelErr)
	case len(canceled) < len(waiting)+len(acked):
		r.cancelNote = fmt.Sprintf("all tasks stopped, but only %d of %d cancel calls were answered (first error %v)", len(canceled), len(waiting)+len(acked), cancelErr)
	}
	e.progress("5: %d cancel calls answered; %d tasks running %.1f s after the first", len(canceled), c.rec.Running(), r.cancelTook.Seconds())
	return r, nil
}

// forEach calls f for every id from submitClients goroutines sharing one
// h2c client of the server at url, until ctx is done.
// It returns the ids for which f succeeded and the first error.
func forEach(ctx context.Context, ids []string, f func(context.Context, jobplanev1connect.DispatcherServiceClient, string) error, url string) ([]string, error) {
	client := NewDispatcher(url, H2C)
	var (
		next  atomic.Int64
		mu    sync.Mutex
		ok    []string
		first error
		wg    sync.WaitGroup
	)
	for range submitClients {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= len(ids) {
					return
				}
				cctx, cancel := context.WithTimeout(ctx, callTimeout)
				err := f(cctx, client, ids[i])
				cancel()
				mu.Lock()
				if err == nil {
					ok = append(ok, ids[i])
				} else if first == nil {
					first = err
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return ok, first
}

// sleep waits d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

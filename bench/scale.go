package bench

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
)

// queryTimeout bounds each overview and list call of the scale row.
const queryTimeout = 2 * time.Second

// runScale measures row 5: many one-task jobs running at once (bench-block
// tasks, which run until canceled) on 40 TaskExecutors in one JobManager.
// Phases, each bounded: submit and wait until all run (or the bound
// passes: the row reports how many ran); at steady state the JobManager's
// CPU and the RPCs between it and the TaskExecutors, in windows with no
// other load; then the latency of GetClusterOverview and ListJobs (page
// size 100) from one client; whether any job FAILED; then as many jobs
// again, which wait for slots, and the JobManager's CPU beside them; then
// cancel all.
func runScale(ctx context.Context, e *env) (Outcome, error) {
	tes, jobs := pick(e, 40, 4), pick(e, 10_000, 500)
	reachBound := pick(e, 75*time.Second, 20*time.Second)
	windows, window, queryWindow := 3, pick(e, 6*time.Second, time.Second), pick(e, 3*time.Second, time.Second)
	cancelBound := pick(e, 30*time.Second, 15*time.Second)

	e.progress("5: starting %d TaskExecutors of %d slots", tes, jobs/tes)
	c, err := startCluster(ctx, e, tes, jobs/tes, false)
	if err != nil {
		return Outcome{}, err
	}
	defer c.stop()
	pid := c.jm.PID()
	baseRSS, _ := RSSBytes(pid)
	name := fmt.Sprintf("%d one-task jobs running, %dx%d slots", jobs, tes, jobs/tes)

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
		return Outcome{}, ctx.Err()
	}
	if reached == 0 {
		return Outcome{}, fmt.Errorf("no job ran within %v (%d acknowledged; first error: %v)", reachBound, len(acked), firstErr)
	}
	reachNote := fmt.Sprintf("all %d running %.1f s after the first submission (acks took %.1f s)", jobs, reachTime.Seconds(), submitted.Seconds())
	if reached < int64(jobs) {
		reachNote = fmt.Sprintf("only %d of %d running after %.0f s, when %d submissions were acknowledged (first error: %v); measured from there, as deployment goes on", reached, jobs, reachBound.Seconds(), len(acked), firstErr)
	}

	// Steady state: the JobManager's CPU and the RPCs, no other load.
	meter, err := NewCPUMeter(pid)
	if err != nil {
		return Outcome{}, err
	}
	self, err := NewCPUMeter(os.Getpid())
	if err != nil {
		return Outcome{}, err
	}
	var cores, rpcs, toJM, fromJM, toStore []float64
	minRunning := reached
	for range windows {
		a, b, s := c.tes.Calls.ToJobManager.Load(), c.tes.Calls.FromJobManager.Load(), c.tes.Calls.ToStore.Load()
		tw := time.Now()
		if err := sleep(ctx, window); err != nil {
			return Outcome{}, err
		}
		x, err := meter.Cores()
		if err != nil {
			return Outcome{}, fmt.Errorf("jobmanager gone: %w", err)
		}
		secs := time.Since(tw).Seconds()
		da, db, ds := c.tes.Calls.ToJobManager.Load()-a, c.tes.Calls.FromJobManager.Load()-b, c.tes.Calls.ToStore.Load()-s
		minRunning = min(minRunning, c.rec.Running())
		cores = append(cores, x)
		rpcs = append(rpcs, float64(da+db+ds)/secs)
		toJM, fromJM, toStore = append(toJM, float64(da)/secs), append(fromJM, float64(db)/secs), append(toStore, float64(ds)/secs)
	}
	selfCores, _ := self.Cores()
	rss, err := RSSBytes(pid)
	if err != nil {
		return Outcome{}, fmt.Errorf("jobmanager gone: %w", err)
	}

	// Query latency, one client, a call every 10ms. A call that fails
	// (at the latest after queryTimeout) counts with the time it took, a
	// lower bound of its latency.
	var ovP50, ovP99, lsP50, lsP99 []float64
	var queries, queryFailures int
	var queryErr error
	timed := func(call func(context.Context) error) time.Duration {
		cctx, cancel := context.WithTimeout(ctx, queryTimeout)
		defer cancel()
		t := time.Now()
		err := call(cctx)
		queries++
		if err != nil {
			queryFailures++
			queryErr = err
		}
		return time.Since(t)
	}
	for range windows {
		var ov, ls []time.Duration
		end := time.Now().Add(queryWindow)
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
		minRunning = min(minRunning, c.rec.Running())
		ovP50, ovP99 = append(ovP50, LatencyMs(ov, 50)), append(ovP99, LatencyMs(ov, 99))
		lsP50, lsP99 = append(lsP50, LatencyMs(ls, 50)), append(lsP99, LatencyMs(ls, 99))
	}
	if ctx.Err() != nil {
		return Outcome{}, ctx.Err()
	}
	queryNote := fmt.Sprintf("%d calls", queries)
	if queryFailures > 0 {
		queryNote = fmt.Sprintf("%d of %d calls failed, counted with their duration (first: %v)", queryFailures, queries, queryErr)
	}
	// Whether a job FAILED, from the overview.
	failed, stillRunning, starts := -1, c.rec.Running(), c.rec.Blocked()
	if ov, err := c.overview(ctx); err == nil {
		failed = int(ov.GetJobsFailed())
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
		return Outcome{}, fmt.Errorf("jobmanager gone: %w", err)
	}
	var waitCores []float64
	for range windows {
		if err := sleep(ctx, window); err != nil {
			return Outcome{}, err
		}
		x, err := meter.Cores()
		if err != nil {
			return Outcome{}, fmt.Errorf("jobmanager gone: %w", err)
		}
		waitCores = append(waitCores, x)
	}
	waitRSS, _ := RSSBytes(pid)
	waitNote := fmt.Sprintf("%d windows of %v, %d jobs waiting beside %d running, no client calls; RSS %.0f MiB", windows, window, len(waiting), c.rec.Running(), float64(waitRSS)/(1<<20))
	if busy >= 0.1 {
		waitNote += fmt.Sprintf("; the JobManager still used %.2f cores %v after the submissions", busy, settleBound)
	}
	if len(waiting) < jobs {
		waitNote += fmt.Sprintf("; only %d of %d waiting jobs acknowledged within %v (first error: %v)", len(waiting), jobs, reachBound, waitErr)
	}

	lost := c.leadershipNote(ctx)

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
	cancelTook := time.Since(tc)
	cancelNote := fmt.Sprintf("%d cancel calls answered; all tasks stopped %.1f s after the first", len(canceled), cancelTook.Seconds())
	if left := c.rec.Running(); left > 0 {
		cancelNote = fmt.Sprintf("%d tasks still running %.0f s after the first cancel (%d calls answered, first error %v)", left, cancelBound.Seconds(), len(canceled), cancelErr)
	}
	e.progress("5: %s", cancelNote)

	rpcNote := fmt.Sprintf("per second: TE→JM %.0f, JM→TE %.0f, TE→HA store %.0f", Median(toJM), Median(fromJM), Median(toStore))
	failNote := fmt.Sprintf("%d tasks running at the end of the steady state (%d at its start, fewest %d in between); %d task starts for %d acknowledged jobs",
		stillRunning, reached, minRunning, starts, len(acked))
	failedValue := SpreadOf([]float64{float64(failed)})
	if failed < 0 {
		failedValue, failNote = Spread{}, "the overview did not answer; "+failNote
	}
	if lost != "" {
		failNote += "; " + lost
	}
	rows := []Row{
		{ID: "5", Scenario: name, Measure: "jobs running", Value: SpreadOf([]float64{float64(reached)}), Target: fmt.Sprint(jobs), Note: reachNote},
		{ID: "5", Scenario: name, Measure: "JM CPU cores", Value: SpreadOf(cores), Target: "< 1", Note: fmt.Sprintf("%d windows of %v, no queries; the bench process (TaskExecutors) used %.2f cores", windows, window, selfCores)},
		{ID: "5", Scenario: name, Measure: "JM RSS MiB", Value: SpreadOf([]float64{float64(rss) / (1 << 20)}), Target: "< 1024", Note: fmt.Sprintf("%.0f MiB before the first job", float64(baseRSS)/(1<<20))},
		{ID: "5", Scenario: name, Measure: "RPCs/s JM⇄TEs", Value: SpreadOf(rpcs), Note: rpcNote},
		{ID: "5", Scenario: name, Measure: "GetClusterOverview p50 ms", Value: SpreadOf(ovP50), Target: "≤ 10", Note: queryNote},
		{ID: "5", Scenario: name, Measure: "GetClusterOverview p99 ms", Value: SpreadOf(ovP99), Target: "≤ 10"},
		{ID: "5", Scenario: name, Measure: "ListJobs(100) p50 ms", Value: SpreadOf(lsP50), Target: "≤ 10"},
		{ID: "5", Scenario: name, Measure: "ListJobs(100) p99 ms", Value: SpreadOf(lsP99), Target: "≤ 10"},
		{ID: "5", Scenario: name, Measure: "jobs FAILED", Value: failedValue, Target: "0", Note: failNote},
		{ID: "5", Scenario: name, Measure: fmt.Sprintf("JM CPU cores, +%d waiting", jobs), Value: SpreadOf(waitCores), Target: "< 1", Note: waitNote},
		{ID: "5", Scenario: name, Measure: "cancel all s", Value: SpreadOf([]float64{cancelTook.Seconds()}), Note: cancelNote},
	}
	return Outcome{Rows: rows}, nil
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

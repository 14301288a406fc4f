package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// submitClients is the number of concurrent submitting clients.
const submitClients = 64

// fullSettleBound and quickSettleBound bound the wait for the JobManager
// to go quiet before a floor run, in the full and in the quick mode.
const fullSettleBound, quickSettleBound = 3 * time.Second, time.Second

// Targets of DESIGN.md §6, as the table states them.
const (
	targetAcks = "≥ 0.8× floor"
	// A job that runs to its end (1a, beside the lifecycle floor) may
	// take up to 3× the floor's p99; an admission (1b, beside the
	// one-write floor) up to 2× (issue 33, targets 1 and 2).
	targetP99Lifecycle = "≤ 3× floor"
	targetP99Admission = "≤ 2× floor"
)

// clusterShape is the TaskExecutors of a submission cluster, and the
// floor it is compared with.
type clusterShape struct {
	name             string
	taskExecutors    int
	slotsPerExecutor int
	// lifecycleFloor compares the cluster with the lifecycle floor
	// (every job runs to its end) rather than the one-write floor
	// (admission).
	lifecycleFloor bool
}

var (
	// freeSlots has slots for every noop job that can be in flight at
	// once at the rates this machine reaches (checked: the row notes the
	// fewest slots seen free), so every job runs to its end: compared
	// with the lifecycle floor (issue 33, target 1).
	freeSlots = clusterShape{"free slots", 4, 500, true}
	// defaultCluster is the standalone default: jobs pile up waiting, and
	// the row measures admission, beside the one-write floor.
	defaultCluster = clusterShape{"default cluster", 2, 4, false}
)

// floorName names a shape's floor in its row.
func (s clusterShape) floorName() string {
	if s.lifecycleFloor {
		return "lifecycle floor"
	}
	return "one-write floor"
}

// runSubmission measures row 1: SubmitJob throughput and latency of 64
// clients over h2c and HTTP/1.1, on a cluster with free slots and on the
// default cluster, each alternating with the floor (same protocol, same
// machine, same run), plus raw etcd puts of the same bytes on the floor's
// member.
func runSubmission(ctx context.Context, e *env) (Outcome, error) {
	var out Outcome
	var raw []RawResult
	d := pick(e, 3*time.Second, time.Second)
	for _, p := range []Protocol{H2C, HTTP1} {
		for vi, shape := range []clusterShape{freeSlots, defaultCluster} {
			id := fmt.Sprintf("1%c", 'a'+vi)
			rows, r, err := submissionCase(ctx, e, id, p, shape, d)
			out.Rows = append(out.Rows, rows...)
			if err != nil {
				return out, fmt.Errorf("%s, %s: %w", p, shape.name, err)
			}
			raw = append(raw, r)
		}
	}
	var rates, p50s, p99s []float64
	for _, r := range raw {
		rates, p50s, p99s = append(rates, r.Rate()), append(p50s, r.P50Ms), append(p99s, r.P99Ms)
	}
	name := "raw etcd put (floor member), 64 writers"
	out.Rows = append(out.Rows,
		Row{ID: "1r", Scenario: name, Measure: "acks/s", Value: SpreadOf(rates), Note: "one run beside each case above"},
		Row{ID: "1r", Scenario: name, Measure: "p50 ms", Value: SpreadOf(p50s)},
		Row{ID: "1r", Scenario: name, Measure: "p99 ms", Value: SpreadOf(p99s)},
	)
	return out, nil
}

// submissionCase runs one protocol on one cluster shape: runs of d each,
// the floor first in every round, and one run of raw puts on the floor.
//
// Both sides are measured by their SubmitJob answers (acks/s, p50, p99),
// also beside the lifecycle floor: the JobManager answers once the plan
// is written and runs the job afterwards, and so does the lifecycle
// floor. What either side left unfinished at a run's end goes in the
// note.
func submissionCase(ctx context.Context, e *env, id string, p Protocol, shape clusterShape, d time.Duration) ([]Row, RawResult, error) {
	e.progress("%s: %s, %s (%d x %d slots), beside the %s", id, p, shape.name, shape.taskExecutors, shape.slotsPerExecutor, shape.floorName())
	c, err := startCluster(ctx, e, shape.taskExecutors, shape.slotsPerExecutor, true)
	if err != nil {
		return nil, RawResult{}, err
	}
	defer c.stop()
	var standIn *StandInTaskExecutor
	if shape.lifecycleFloor {
		if standIn, err = StartStandInTaskExecutor(c.floor.URL); err != nil {
			return nil, RawResult{}, err
		}
		// Stopped before the floor (deferred after c.stop).
		defer standIn.Stop()
		if err := c.floor.Lifecycle(ctx, standIn.URL); err != nil {
			return nil, RawResult{}, err
		}
	}
	sys := NewDispatcher(c.jm.URL, p)
	floor := NewDispatcher(c.floor.URL, p)
	graph := OneTaskGraph("noop")
	// Warm up both: connections, and the first allocations of each side.
	warm := pick(e, 200*time.Millisecond, 100*time.Millisecond)
	SubmitLoad(ctx, floor, submitClients, warm, "warm", graph)
	SubmitLoad(ctx, sys, submitClients, warm, "warm", graph)
	settleBound := pick(e, fullSettleBound, quickSettleBound)

	var sysRuns, floorRuns []Load
	var sysCost, floorCost []cpuPerAck
	minFree := c.slots
	var busy []float64               // cores the JobManager still used when a floor run began
	var undrained []int              // jobs the lifecycle floor still had pending when a run began
	var sysLeft, floorLeft []float64 // jobs unfinished at a run's end
	for run := range e.runs() {
		if cores := c.settle(ctx, settleBound); cores >= 0.1 {
			busy = append(busy, cores)
		}
		if standIn != nil {
			st, err := c.floor.Drain(ctx, settleBound)
			if err != nil {
				return nil, RawResult{}, err
			}
			if !st.Drained {
				undrained = append(undrained, st.Pending)
			}
		}
		var f Load
		floorCPU, err := measureCPU(c.floor.cmd.Process.Pid, func() {
			f = SubmitLoad(ctx, floor, submitClients, d, fmt.Sprintf("f%d", run), graph)
		})
		if err != nil {
			return nil, RawResult{}, err
		}
		if err := usable(f); err != nil {
			return nil, RawResult{}, fmt.Errorf("floor: %w", err)
		}
		if standIn != nil {
			st, err := c.floor.Drain(ctx, 0)
			if err != nil {
				return nil, RawResult{}, err
			}
			floorLeft = append(floorLeft, float64(st.Pending))
		}
		var s Load
		stopWatch := watchFreeSlots(ctx, c, &minFree)
		sysCPU, err := measureCPU(c.jm.PID(), func() {
			s = SubmitLoad(ctx, sys, submitClients, d, fmt.Sprintf("s%d", run), graph)
		})
		stopWatch()
		if err != nil {
			return nil, RawResult{}, err
		}
		if standIn != nil {
			if ov, err := c.overview(ctx); err == nil {
				sysLeft = append(sysLeft, float64(ov.GetRunningJobCount()))
			}
		}
		if err := usable(s); err != nil {
			return nil, RawResult{}, fmt.Errorf("jobmanager: %w (log: %s)", err, c.jm.LogTail(5))
		}
		floorRuns, sysRuns = append(floorRuns, f), append(sysRuns, s)
		floorCost, sysCost = append(floorCost, floorCPU.perAck(f.Acks)), append(sysCost, sysCPU.perAck(s.Acks))
	}
	c.settle(ctx, settleBound)
	var life LifecycleStats
	if standIn != nil {
		if life, err = c.floor.Drain(ctx, settleBound); err != nil {
			return nil, RawResult{}, err
		}
	}
	raw, err := c.floor.RawPuts(ctx, d, submitClients)
	if err != nil {
		return nil, RawResult{}, err
	}
	name := fmt.Sprintf("submit, %s, %s (%dx%d), beside the %s", p, shape.name, shape.taskExecutors, shape.slotsPerExecutor, shape.floorName())
	note := fmt.Sprintf("fewest free slots %d of %d", minFree, c.slots)
	if standIn != nil {
		note += "; " + lifecycleNote(sysLeft, floorLeft, undrained, settleBound, life, standIn)
	}
	note += "; " + costNote(sysCost, floorCost, standIn != nil)
	if len(busy) > 0 {
		note += fmt.Sprintf("; the JobManager still used %.2f cores %v after a run, beside the floor", Median(busy), settleBound)
	}
	if errs := countErrors(sysRuns); errs != "" {
		note += "; " + errs
	}
	if lost := c.leadershipNote(ctx); lost != "" {
		note += "; " + lost
	}
	p99Target := targetP99Admission
	if shape.lifecycleFloor {
		p99Target = targetP99Lifecycle
	}
	rows := []Row{
		{ID: id, Scenario: name, Measure: "acks/s", Value: SpreadOf(rates(sysRuns)), Floor: SpreadOf(rates(floorRuns)), Target: targetAcks, Note: note},
		{ID: id, Scenario: name, Measure: "p50 ms", Value: SpreadOf(pcts(sysRuns, 50)), Floor: SpreadOf(pcts(floorRuns, 50))},
		{ID: id, Scenario: name, Measure: "p99 ms", Value: SpreadOf(pcts(sysRuns, 99)), Floor: SpreadOf(pcts(floorRuns, 99)), Target: p99Target},
	}
	return rows, raw, nil
}

// usable fails for a run in which nothing was acknowledged: the server
// under test is broken, not slow.
func usable(l Load) error {
	if l.Acks > 0 {
		return nil
	}
	if l.FirstErr != nil {
		return fmt.Errorf("no submission acknowledged in %v (%d errors, first: %w)", l.Duration, l.Errors, l.FirstErr)
	}
	return fmt.Errorf("no submission acknowledged in %v", l.Duration)
}

func rates(ls []Load) []float64 {
	out := make([]float64, len(ls))
	for i, l := range ls {
		out[i] = l.Rate()
	}
	return out
}

func pcts(ls []Load, p float64) []float64 {
	out := make([]float64, len(ls))
	for i, l := range ls {
		out[i] = LatencyMs(l.Latencies, p)
	}
	return out
}

// countErrors says how many submissions failed, and how the first did.
func countErrors(ls []Load) string {
	n := 0
	var first error
	for _, l := range ls {
		n += l.Errors
		if first == nil {
			first = l.FirstErr
		}
	}
	if n == 0 {
		return ""
	}
	msg := first.Error()
	if len(msg) > 80 {
		msg = msg[:80] + "…"
	}
	return fmt.Sprintf("%d submissions failed (%s)", n, msg)
}

// watchFreeSlots records into *minFree the fewest available slots the
// overview shows (every 200ms) until the returned stop is called.
func watchFreeSlots(ctx context.Context, c *cluster, minFree *int) (stop func()) {
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			if ov, err := c.overview(wctx); err == nil {
				*minFree = min(*minFree, int(ov.GetFreeSlotCount()))
			}
			select {
			case <-wctx.Done():
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	})
	return func() { cancel(); wg.Wait() }
}

// pileUpRSSLimit stops the pile-up run early if the JobManager grows past
// it, so that the bench never takes the machine's memory.
const pileUpRSSLimit = 8 << 30

// runPileUp measures row 2: acks/s in 5s windows over 60s of 64 h2c
// clients on the default cluster, where every job but eight waits; one
// fresh JobManager per run. Flat means the last window is as fast as the
// first, and no window much slower than the fastest.
func runPileUp(ctx context.Context, e *env) (Outcome, error) {
	total, window := pick(e, 60*time.Second, 6*time.Second), pick(e, 5*time.Second, 2*time.Second)
	var (
		first, last, ratios []float64
		gcShares            []float64
		gcNotes             []string
		notes               []string
		txt                 strings.Builder
	)
	for run := range e.runs() {
		e.progress("2: run %d of %d, %v", run+1, e.runs(), total)
		p, err := pileUpRun(ctx, e, total)
		if err != nil {
			return Outcome{}, err
		}
		ws := p.load.Windows(window)
		if len(ws) == 0 {
			return Outcome{}, fmt.Errorf("a run shorter than one window")
		}
		ratio := SpreadOf(ws).Min / SpreadOf(ws).Max
		first, last, ratios = append(first, ws[0]), append(last, ws[len(ws)-1]), append(ratios, ratio)
		gcShares = append(gcShares, 100*p.gcShare)
		gcNotes = append(gcNotes, fmt.Sprintf("run %d: JobManager at %.2f cores", run+1, p.cpu))
		fmt.Fprintf(&txt, "Run %d:\n", run+1)
		for i, w := range ws {
			fmt.Fprintf(&txt, "%3.0f–%3.0f s  %6.0f acks/s\n", (time.Duration(i) * window).Seconds(), (time.Duration(i+1) * window).Seconds(), w)
		}
		fmt.Fprintf(&txt, "min/max %.2f; %d jobs acknowledged, all but %d waiting for slots at the end; JobManager peak RSS %.0f MiB\n\n",
			ratio, p.load.Acks, p.slots, float64(p.peakRSS)/(1<<20))
		note := fmt.Sprintf("run %d: %d jobs piled up, JM peak RSS %.0f MiB", run+1, p.load.Acks, float64(p.peakRSS)/(1<<20))
		if p.stopped {
			note += ", stopped early: JobManager RSS over 8 GiB"
		}
		if errs := countErrors([]Load{p.load}); errs != "" {
			note += ", " + errs
		}
		if p.lost != "" {
			note += ", " + p.lost
		}
		notes = append(notes, note)
	}
	name := fmt.Sprintf("submit, h2c, default cluster, %v in %v windows", total, window)
	return Outcome{
		Rows: []Row{
			{ID: "2", Scenario: name, Measure: "acks/s, first window", Value: SpreadOf(first)},
			{ID: "2", Scenario: name, Measure: "acks/s, last window", Value: SpreadOf(last), Note: strings.Join(notes, "; ")},
			{ID: "2", Scenario: name, Measure: "slowest/fastest window", Value: SpreadOf(ratios), Target: "≥ 0.8", Note: "per run: the slowest window's acks/s over the fastest's"},
			{ID: "2", Scenario: name, Measure: "GC % of the JobManager's CPU", Value: SpreadOf(gcShares), Target: "≤ 10%",
				Note: "go_cpu_classes_gc_total_cpu_seconds_total (the runtime's estimate) over the process's CPU time, over the run; " + strings.Join(gcNotes, ", ")},
		},
		Details: []Detail{{Title: "Row 2: acks/s per window while jobs pile up", Text: strings.TrimSuffix(txt.String(), "\n")}},
	}, nil
}

// pileUp is one run of row 2.
type pileUp struct {
	load    Load
	slots   int
	peakRSS int64
	stopped bool   // by the RSS guard
	lost    string // the leadership note
	// gcShare is the share of the JobManager's CPU over the run that went
	// to its garbage collector, and cpu that CPU in cores.
	gcShare, cpu float64
}

// pileUpRun submits for total on a fresh default cluster, watching the
// JobManager's RSS.
func pileUpRun(ctx context.Context, e *env, total time.Duration) (pileUp, error) {
	c, err := startCluster(ctx, e, defaultCluster.taskExecutors, defaultCluster.slotsPerExecutor, false)
	if err != nil {
		return pileUp{}, err
	}
	defer c.stop()
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var peakRSS int64
	var guard sync.WaitGroup
	guard.Go(func() {
		for {
			if rss, err := RSSBytes(c.jm.PID()); err == nil {
				peakRSS = max(peakRSS, rss)
				if rss > pileUpRSSLimit {
					cancel()
					return
				}
			}
			select {
			case <-lctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
	})
	gc0, err1 := GCCPUTime(ctx, c.jm.URL)
	cpu0, err2 := CPUTime(c.jm.PID())
	l := SubmitLoad(lctx, NewDispatcher(c.jm.URL, H2C), submitClients, total, "pile", OneTaskGraph("noop"))
	gc1, err3 := GCCPUTime(ctx, c.jm.URL)
	cpu1, err4 := CPUTime(c.jm.PID())
	if err := errors.Join(err1, err2, err3, err4); err != nil && ctx.Err() == nil {
		return pileUp{}, fmt.Errorf("measuring the JobManager's GC CPU: %w", err)
	}
	stopped := lctx.Err() != nil && ctx.Err() == nil
	cancel()
	guard.Wait()
	if ctx.Err() != nil {
		return pileUp{}, ctx.Err()
	}
	if err := usable(l); err != nil {
		return pileUp{}, err
	}
	p := pileUp{load: l, slots: c.slots, peakRSS: peakRSS, stopped: stopped, lost: c.leadershipNote(ctx)}
	if cpu1 > cpu0 {
		p.gcShare = (gc1 - gc0).Seconds() / (cpu1 - cpu0).Seconds()
	}
	if l.Duration > 0 {
		p.cpu = (cpu1 - cpu0).Seconds() / l.Duration.Seconds()
	}
	return p, nil
}

// cpuUse is the CPU time two processes used over a run: the server
// measured (the JobManager or the floor) and the bench process (its
// clients and, on the JobManager's side, its TaskExecutors).
type cpuUse struct{ server, bench time.Duration }

// measureCPU runs f and returns the CPU time process pid and the bench
// process used meanwhile.
func measureCPU(pid int, f func()) (cpuUse, error) {
	server0, err1 := CPUTime(pid)
	bench0, err2 := CPUTime(os.Getpid())
	f()
	server1, err3 := CPUTime(pid)
	bench1, err4 := CPUTime(os.Getpid())
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return cpuUse{}, fmt.Errorf("measuring CPU: %w", err)
	}
	return cpuUse{server1 - server0, bench1 - bench0}, nil
}

// cpuPerAck is CPU time per acknowledgement, in microseconds.
type cpuPerAck struct{ server, bench float64 }

func (u cpuUse) perAck(acks int) cpuPerAck {
	if acks == 0 {
		return cpuPerAck{}
	}
	us := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(acks) }
	return cpuPerAck{us(u.server), us(u.bench)}
}

// lifecycleNote says how 1a compares with the lifecycle floor beyond the
// figures: both are measured by SubmitJob answers, and a job is done on
// either side once its finish write is acknowledged; the jobs either
// side left unfinished at a run's end (medians), any floor run that
// began before the last one's jobs were done, and any job whose
// lifecycle in the floor failed.
func lifecycleNote(sysLeft, floorLeft []float64, undrained []int, bound time.Duration, life LifecycleStats, standIn *StandInTaskExecutor) string {
	note := fmt.Sprintf("jobs acknowledged but not finished at a run's end: JobManager %s, floor %s", medianOrDash(sysLeft), medianOrDash(floorLeft))
	if len(undrained) > 0 {
		note += fmt.Sprintf("; %d floor run(s) began with jobs of the last still pending after %v (%v)", len(undrained), bound, undrained)
	}
	if life.Failed > 0 {
		note += fmt.Sprintf("; %d floor jobs failed (%s)", life.Failed, life.FirstFailure)
	}
	if n := standIn.Failed.Load(); n > 0 {
		note += fmt.Sprintf("; %d stand-in reports failed (%s)", n, standIn.FirstErr())
	}
	return note
}

// medianOrDash formats the median of xs, or "—" for none.
func medianOrDash(xs []float64) string {
	if len(xs) == 0 {
		return "—"
	}
	return FormatNumber(Median(xs))
}

// costNote states the CPU time per acknowledgement on both sides (medians
// over the runs): what each ack costs the machine, whose cores the
// server, its TaskExecutors and the clients share. With the lifecycle
// floor, the stand-in TaskExecutor's CPU is on the floor's bench side, as
// the real TaskExecutors' is on the JobManager's.
func costNote(sys, floor []cpuPerAck, standIn bool) string {
	med := func(cs []cpuPerAck) (server, bench float64) {
		var ss, bs []float64
		for _, c := range cs {
			ss, bs = append(ss, c.server), append(bs, c.bench)
		}
		return Median(ss), Median(bs)
	}
	js, jb := med(sys)
	fs, fb := med(floor)
	floorBench := "clients"
	if standIn {
		floorBench = "clients, stand-in TaskExecutor"
	}
	return fmt.Sprintf("CPU per ack: JobManager %.0f µs + bench %.0f µs (clients, TaskExecutors); floor %.0f µs + bench %.0f µs (%s)", js, jb, fs, fb, floorBench)
}

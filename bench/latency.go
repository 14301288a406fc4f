package bench

import (
	"context"
	"fmt"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
)

// latencyJobTimeout bounds each step of one job in the latency row.
const latencyJobTimeout = 30 * time.Second

// runLatency measures row 3 on an idle cluster of one TaskExecutor with
// one slot, so that a job can start only on the slot the previous job
// freed:
//
//   - each run first times N sequential SubmitJob round trips to the
//     floor (one client, h2c), and N empty unary round trips to it
//     (GetClusterOverview, answered at once);
//   - then N one-task jobs one after the other, each submitted once the
//     overview shows the slot free again: submit → RUNNING (the invokable
//     started), submit → FINISHED (GetJobResult with wait returned), and
//     FINISHED → slot free (the overview, polled every millisecond, shows
//     it available);
//   - then N jobs back to back, each submitted as soon as the previous
//     one's result arrived: FINISHED → the next job's task started, which
//     adds the next submission's own submit → RUNNING to the slot's
//     release.
func runLatency(ctx context.Context, e *env) (Outcome, error) {
	c, err := startCluster(ctx, e, 1, 1, true)
	if err != nil {
		return Outcome{}, err
	}
	defer c.stop()
	n := pick(e, 100, 10)
	floor := NewDispatcher(c.floor.URL, H2C)
	graph := OneTaskGraph(InvokableStart)
	var floorRTT, contractFloor, running, finished, freed, freedP99, nextStart []float64
	var runningP99 []float64
	for run := range e.runs() {
		var rtt []time.Duration
		for i := range n {
			t0 := time.Now()
			cctx, cancel := context.WithTimeout(ctx, callTimeout)
			_, err := floor.SubmitJob(cctx, &jobplanev1.SubmitJobRequest{JobId: fmt.Sprintf("l%d-%d", run, i), JobGraph: graph})
			cancel()
			if err != nil {
				return Outcome{}, fmt.Errorf("floor: %w", err)
			}
			rtt = append(rtt, time.Since(t0))
		}
		floorRTT = append(floorRTT, LatencyMs(rtt, 50))
		var empty []time.Duration
		for range n {
			t0 := time.Now()
			cctx, cancel := context.WithTimeout(ctx, callTimeout)
			_, err := floor.GetClusterOverview(cctx, &jobplanev1.GetClusterOverviewRequest{})
			cancel()
			if err != nil {
				return Outcome{}, fmt.Errorf("floor: %w", err)
			}
			empty = append(empty, time.Since(t0))
		}
		// The contract's least path from submit to a running task: the
		// acknowledged submission, then a slot allocated to the job
		// (RequestSlot, SLOT_NOT_ALLOCATED otherwise) and the attempt
		// deployed into it (SubmitTask, or the answer to OfferSlots): two
		// more round trips that depend on each other.
		contractFloor = append(contractFloor, LatencyMs(rtt, 50)+2*LatencyMs(empty, 50))

		var toRun, toFinish, toFree []time.Duration
		for i := range n {
			id := fmt.Sprintf("idle%d-%d", run, i)
			t0, started, done, err := c.submitAndFinish(ctx, id, graph)
			if err != nil {
				return Outcome{}, err
			}
			free, err := c.waitSlotsFree(ctx, time.Millisecond, latencyJobTimeout)
			if err != nil {
				return Outcome{}, err
			}
			toRun, toFinish, toFree = append(toRun, started.Sub(t0)), append(toFinish, done.Sub(t0)), append(toFree, free.Sub(done))
		}
		running, runningP99 = append(running, LatencyMs(toRun, 50)), append(runningP99, LatencyMs(toRun, 99))
		finished = append(finished, LatencyMs(toFinish, 50))
		freed, freedP99 = append(freed, LatencyMs(toFree, 50)), append(freedP99, LatencyMs(toFree, 99))

		var toNext []time.Duration
		var prevDone time.Time
		for i := range n {
			_, started, done, err := c.submitAndFinish(ctx, fmt.Sprintf("b2b%d-%d", run, i), graph)
			if err != nil {
				return Outcome{}, err
			}
			if i > 0 {
				toNext = append(toNext, started.Sub(prevDone))
			}
			prevDone = done
		}
		nextStart = append(nextStart, LatencyMs(toNext, 50))
	}
	name := fmt.Sprintf("one-task job, idle 1x1 cluster, %d jobs per run", n)
	floorSpread := SpreadOf(floorRTT)
	return Outcome{Rows: []Row{
		{ID: "3", Scenario: name, Measure: "submit→RUNNING p50 ms", Value: SpreadOf(running), Floor: floorSpread, Target: "≤ 1.5× floor", Note: "floor: SubmitJob round trip p50, one client"},
		{ID: "3", Scenario: name, Measure: "submit→RUNNING p50 ms, contract floor", Value: SpreadOf(running), Floor: SpreadOf(contractFloor), Note: "floor: SubmitJob round trip p50 + 2 × an empty unary round trip p50 (the slot's allocation and the deployment, which the contract requires after the acknowledgement)"},
		{ID: "3", Scenario: name, Measure: "submit→RUNNING p99 ms", Value: SpreadOf(runningP99)},
		{ID: "3", Scenario: name, Measure: "submit→FINISHED p50 ms", Value: SpreadOf(finished), Floor: floorSpread, Note: "FINISHED: GetJobResult(wait) returned"},
		{ID: "3", Scenario: name, Measure: "FINISHED→slot free p50 ms", Value: SpreadOf(freed), Target: "≤ 50 ms", Note: "overview polled every 1 ms"},
		{ID: "3", Scenario: name, Measure: "FINISHED→slot free p99 ms", Value: SpreadOf(freedP99), Target: "≤ 50 ms"},
		{ID: "3", Scenario: name, Measure: "FINISHED→next task start p50 ms", Value: SpreadOf(nextStart), Note: "back to back; includes the next submit→RUNNING"},
	}}, nil
}

// submitAndFinish submits a one-task bench-start job and waits until its
// task started and its result arrived, returning when it was sent, when
// its task started and when its result arrived.
func (c *cluster) submitAndFinish(ctx context.Context, id string, graph *jobplanev1.JobGraph) (sent, started, done time.Time, err error) {
	ch := c.rec.Expect(id, 1)
	defer c.rec.Forget(id)
	sent = time.Now()
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	_, err = c.jm.Dispatcher.SubmitJob(cctx, &jobplanev1.SubmitJobRequest{JobId: id, JobGraph: graph})
	cancel()
	if err != nil {
		return sent, started, done, fmt.Errorf("submit %s: %w", id, err)
	}
	if err := c.result(ctx, id, latencyJobTimeout); err != nil {
		return sent, started, done, err
	}
	done = time.Now()
	if started, err = waitFor(ctx, ch, latencyJobTimeout, "task start of "+id); err != nil {
		return sent, started, done, err
	}
	return sent, started, done, nil
}

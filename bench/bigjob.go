package bench

import (
	"context"
	"fmt"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
)

// bigJobTimeout bounds each phase of one run of the big job.
const bigJobTimeout = 60 * time.Second

// runBigJob measures row 4: one job of two vertices of parallelism 1000
// joined ALL_TO_ALL PIPELINED (one region of 2000 subtasks), on 40
// TaskExecutors of 50 slots: submit → all 2000 invokables started, submit
// → FINISHED, FINISHED → all 2000 slots free again, and the RPCs between
// the TaskExecutors and the JobManager from submit to slots free.
func runBigJob(ctx context.Context, e *env) (Outcome, error) {
	tes, slots, p := pick(e, 40, 4), 50, int32(pick(e, 1000, 100))
	e.progress("4: starting %d TaskExecutors of %d slots", tes, slots)
	c, err := startCluster(ctx, e, tes, slots, false)
	if err != nil {
		return Outcome{}, err
	}
	defer c.stop()
	graph := AllToAllGraph(InvokableStart, p)
	var deployed, finished, freed, rpcs []float64
	for run := range e.runs() {
		id := fmt.Sprintf("big%d", run)
		ch := c.rec.Expect(id, int(2*p))
		calls0 := c.tes.Calls.Total()
		t0 := time.Now()
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		_, err := c.jm.Dispatcher.SubmitJob(cctx, &jobplanev1.SubmitJobRequest{JobId: id, JobGraph: graph})
		cancel()
		if err != nil {
			return Outcome{}, fmt.Errorf("submit: %w", err)
		}
		if err := c.result(ctx, id, bigJobTimeout); err != nil {
			return Outcome{}, err
		}
		done := time.Now()
		all, err := waitFor(ctx, ch, bigJobTimeout, fmt.Sprintf("all %d subtasks of %s started", 2*p, id))
		if err != nil {
			return Outcome{}, err
		}
		c.rec.Forget(id)
		free, err := c.waitSlotsFree(ctx, 5*time.Millisecond, bigJobTimeout)
		if err != nil {
			return Outcome{}, err
		}
		rpcs = append(rpcs, float64(c.tes.Calls.Total()-calls0))
		deployed = append(deployed, all.Sub(t0).Seconds())
		finished = append(finished, done.Sub(t0).Seconds())
		freed = append(freed, free.Sub(done).Seconds()*1000) // ms
		e.progress("4: run %d: deployed in %v, finished in %v", run, all.Sub(t0).Round(time.Millisecond), done.Sub(t0).Round(time.Millisecond))
	}
	name := fmt.Sprintf("2x%d all-to-all pipelined, %dx%d slots", p, tes, slots)
	return Outcome{Rows: []Row{
		{ID: "4", Scenario: name, Measure: "submit→all deployed s", Value: SpreadOf(deployed), Note: fmt.Sprintf("all %d invokables started", 2*p)},
		{ID: "4", Scenario: name, Measure: "submit→FINISHED s", Value: SpreadOf(finished)},
		{ID: "4", Scenario: name, Measure: "FINISHED→slots free ms", Value: SpreadOf(freed), Note: "overview polled every 5 ms"},
		{ID: "4", Scenario: name, Measure: "RPCs JM⇄TEs per run", Value: SpreadOf(rpcs), Note: "from submit to slots free, heartbeats included"},
	}}, nil
}

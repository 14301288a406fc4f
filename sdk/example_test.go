package sdk_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk"
	"github.com/jobplane/jobplane/sdk/jobgraph"
)

// Submit a job and wait for its result. serverURL is a running cluster's
// URL, such as "http://127.0.0.1:8080" for `make run`.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := sdk.New([]string{serverURL})
	if err != nil {
		panic(err)
	}
	defer c.Close()

	b := jobgraph.NewBuilder("hello")
	b.Vertex("greet", "noop").Parallelism(2)
	g, err := b.Build()
	if err != nil {
		panic(err)
	}
	res, err := c.Execute(ctx, g)
	if err != nil {
		panic(err)
	}
	fmt.Println(res.GetStatus())
	// Output: JOB_STATUS_FINISHED
}

// Watch a job's status changes until it ends.
func ExampleClient_Watch() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := sdk.New([]string{serverURL})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	s, err := c.Submit(ctx, &jobplanev1.JobGraph{Name: "nap", Vertices: []*jobplanev1.JobVertex{{
		Id: "nap", Invokable: "sleep", Parallelism: 1, Config: map[string]string{"duration": "100ms"},
	}}})
	if err != nil {
		panic(err)
	}
	var last jobplanev1.JobStatus
	for summary, err := range c.Watch(ctx, s.JobID) {
		if err != nil {
			panic(err)
		}
		last = summary.GetStatus() // every change, in order
	}
	fmt.Println("ended", last)
	// Output: ended JOB_STATUS_FINISHED
}

// List the jobs that finished, a page at a time behind the loop.
func ExampleClient_List() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := sdk.New([]string{serverURL})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	n := 0
	for job, err := range c.List(ctx, sdk.WithStatuses(jobplanev1.JobStatus_JOB_STATUS_FINISHED)) {
		if err != nil {
			panic(err)
		}
		if job.GetStatus() == jobplanev1.JobStatus_JOB_STATUS_FINISHED {
			n++
		}
	}
	fmt.Println(n > 0)
	// Output: true
}

// An invalid graph is refused before it is sent, with the server's words.
func ExampleInvalidJobError() {
	c, err := sdk.New([]string{serverURL})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	g := &jobplanev1.JobGraph{Vertices: []*jobplanev1.JobVertex{{Id: "a", Invokable: "noop", Parallelism: 0}}}
	_, err = c.Submit(context.Background(), g)
	var invalid *sdk.InvalidJobError
	if errors.As(err, &invalid) {
		for _, v := range invalid.Violations {
			fmt.Println(v.Field+":", v.Description)
		}
	}
	// Output: job_graph.vertices[0].parallelism: parallelism 0: must be at least 1
}

// A job id taken by another plan is a DuplicateJobError.
func ExampleDuplicateJobError() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := sdk.New([]string{serverURL})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	id := sdk.NewJobID()
	one := &jobplanev1.JobGraph{Vertices: []*jobplanev1.JobVertex{{Id: "a", Invokable: "noop", Parallelism: 1}}}
	two := &jobplanev1.JobGraph{Vertices: []*jobplanev1.JobVertex{{Id: "b", Invokable: "noop", Parallelism: 1}}}
	if _, err := c.Execute(ctx, one, sdk.WithJobID(id)); err != nil {
		panic(err)
	}
	_, err = c.Submit(ctx, two, sdk.WithJobID(id))
	var dup *sdk.DuplicateJobError
	fmt.Println(errors.As(err, &dup), dup.GloballyTerminated)
	// Output: true true
}

// A server that limits a client's submissions per second refuses one
// over the rate with the delay after which to retry. A Client waits it
// on its own; with retries off, as here, the caller waits it.
func ExampleRetryDelay() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := sdk.New([]string{serverURL}, sdk.WithRetry(sdk.RetryPolicy{MaxElapsed: -1}))
	if err != nil {
		panic(err)
	}
	defer c.Close()
	g := &jobplanev1.JobGraph{Vertices: []*jobplanev1.JobVertex{{Id: "a", Invokable: "noop", Parallelism: 1}}}
	id := sdk.NewJobID() // the same id on every try: one job
	for {
		_, err = c.Submit(ctx, g, sdk.WithJobID(id))
		delay, limited := sdk.RetryDelay(err)
		if !limited {
			break
		}
		select {
		case <-ctx.Done():
			panic(ctx.Err())
		case <-time.After(delay):
		}
	}
	fmt.Println(err)
	// Output: <nil>
}

// Stop a checkpointed job with a savepoint, and go on from it in a new
// job; then delete the savepoint.
func ExampleClient_TriggerSavepoint() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := sdk.New([]string{serverURL})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	graph := func(to, savepoint string) *jobplanev1.JobGraph {
		b := jobgraph.NewBuilder("count")
		b.Vertex("count", "count").Config("to", to).Config("every", "10ms")
		b.Checkpoints(100 * time.Millisecond).RestoreFromSavepoint(savepoint)
		g, err := b.Build()
		if err != nil {
			panic(err)
		}
		return g
	}
	s, err := c.Submit(ctx, graph("1000000", ""))
	if err != nil {
		panic(err)
	}
	// A savepoint needs every subtask running: wait for a checkpoint.
	for {
		cps, err := c.Checkpoints(ctx, s.JobID)
		if err != nil {
			panic(err)
		}
		if cps.GetStats().GetLatest() != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	sp, err := c.TriggerSavepoint(ctx, s.JobID, sdk.WithStop())
	if err != nil {
		panic(err)
	}
	stopped, err := c.Wait(ctx, s.JobID)
	if err != nil {
		panic(err)
	}
	fmt.Println("stopped:", stopped.GetStatus())

	res, err := c.Execute(ctx, graph("1", sp.GetSavepointId()))
	if err != nil {
		panic(err)
	}
	d, err := c.Get(ctx, res.GetJobId(), sdk.WithSummaryView())
	if err != nil {
		panic(err)
	}
	fmt.Println("restored:", res.GetStatus(), d.GetCheckpoints().GetRestoredFrom() == sp.GetSavepointId())
	if err := c.DeleteSavepoint(ctx, sp.GetSavepointId()); err != nil {
		panic(err)
	}
	// Output:
	// stopped: JOB_STATUS_CANCELED
	// restored: JOB_STATUS_FINISHED true
}

// List the savepoints of every job, a page at a time behind the loop.
func ExampleClient_Savepoints() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := sdk.New([]string{serverURL})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	n := 0
	for sp, err := range c.Savepoints(ctx, "") {
		if err != nil {
			panic(err)
		}
		_ = sp.GetSavepointId() // what JobConfig.restore_from_savepoint names
		n++
	}
	fmt.Println(n >= 0)
	// Output: true
}

// Read an ended job's result: what each subtask returned, and the
// accumulators its tasks counted. The built-in count returns its final
// count as its value and adds the steps it counted to "count.steps".
func ExampleClient_Result() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := sdk.New([]string{serverURL})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	s, err := c.Submit(ctx, &jobplanev1.JobGraph{Name: "count", Vertices: []*jobplanev1.JobVertex{{
		Id: "count", Invokable: "count", Parallelism: 2, Config: map[string]string{"to": "3", "every": "1ms"},
	}}})
	if err != nil {
		panic(err)
	}
	if _, err := c.Wait(ctx, s.JobID); err != nil {
		panic(err)
	}
	res, err := c.Result(ctx, s.JobID) // also after a restart or a change of leader
	if err != nil {
		panic(err)
	}
	for _, v := range res.GetValues() {
		fmt.Printf("subtask %d returned %s\n", v.GetAttempt().GetSubtaskIndex(), v.GetValue())
	}
	fmt.Println("count.steps:", res.GetAccumulators()["count.steps"])
	// Output:
	// subtask 0 returned 3
	// subtask 1 returned 3
	// count.steps: 6
}

// Cancel a job, saying why: the first recorded request's reason is kept
// with the job, in its summary and its result.
func ExampleClient_Cancel() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := sdk.New([]string{serverURL})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	s, err := c.Submit(ctx, &jobplanev1.JobGraph{Name: "nap", Vertices: []*jobplanev1.JobVertex{{
		Id: "nap", Invokable: "sleep", Parallelism: 1, Config: map[string]string{"duration": "24h"},
	}}})
	if err != nil {
		panic(err)
	}
	// WithRun cancels only the run this Submit started, never a later
	// run of the same id.
	if _, err := c.Cancel(ctx, s.JobID, sdk.WithRun(s.RunID), sdk.WithReason("superseded by nightly-2")); err != nil {
		panic(err)
	}
	res, err := c.Wait(ctx, s.JobID)
	if err != nil {
		panic(err)
	}
	fmt.Println(res.GetStatus(), res.GetCancellation().GetReason())
	// Output: JOB_STATUS_CANCELED superseded by nightly-2
}

// Purge an ended job's kept result, so that its id runs again, under a
// new run id.
func ExampleClient_Purge() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := sdk.New([]string{serverURL})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	g := &jobplanev1.JobGraph{Name: "nightly", Vertices: []*jobplanev1.JobVertex{{Id: "v", Invokable: "noop", Parallelism: 1}}}
	id := "nightly-" + sdk.NewJobID()[:8]
	first, err := c.Submit(ctx, g, sdk.WithJobID(id))
	if err != nil {
		panic(err)
	}
	if _, err := c.Wait(ctx, id); err != nil {
		panic(err)
	}
	again, err := c.Submit(ctx, g, sdk.WithJobID(id))
	if err != nil {
		panic(err)
	}
	fmt.Println("resubmitted, created:", again.Created) // the kept result answers
	for {
		err := c.Purge(ctx, id, first.RunID)
		if !errors.Is(err, sdk.ErrCleanupPending) {
			if err != nil {
				panic(err)
			}
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	second, err := c.Submit(ctx, g, sdk.WithJobID(id))
	if err != nil {
		panic(err)
	}
	fmt.Println("after the purge, created:", second.Created, "new run:", second.RunID != first.RunID)
	// Output:
	// resubmitted, created: false
	// after the purge, created: true new run: true
}

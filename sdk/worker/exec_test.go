package worker_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk"
	"github.com/jobplane/jobplane/sdk/internal/servertest"
	"github.com/jobplane/jobplane/sdk/worker"
)

// A worker offers exec only when it runs it (Config.AllowExec): a job
// needing exec is refused at submission while no worker offers it, with
// what is offered, and runs once a worker that allows exec has joined.
func TestWorkerOffersExecOnlyWhenAllowed(t *testing.T) {
	c := servertest.Start(t)
	closed := newWorker(t, worker.Config{Server: c.URL, ID: "w-closed"})
	closed.Register("only-closed", func(context.Context, worker.Task) error { return nil })
	start(t, closed)
	c.WaitTaskExecutor(t, "only-closed")

	client, err := sdk.New([]string{c.URL})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	g := &jobplanev1.JobGraph{Name: "exec", Vertices: []*jobplanev1.JobVertex{{Id: "v", Invokable: "exec", Parallelism: 1, Config: map[string]string{"argv": `["true"]`}}}}
	_, err = client.Submit(ctx, g, sdk.WithJobID("exec-refused"))
	var notOffered *sdk.InvokableNotOfferedError
	if !errors.As(err, &notOffered) {
		t.Fatalf("Submit of an exec job with no worker allowing exec = %v, want *sdk.InvokableNotOfferedError", err)
	}
	if !slices.Equal(notOffered.Invokables, []string{"exec"}) || !slices.Contains(notOffered.Offered, "only-closed") || slices.Contains(notOffered.Offered, "exec") {
		t.Errorf("refused for %q with %q offered; want exec, and only-closed offered", notOffered.Invokables, notOffered.Offered)
	}

	open := newWorker(t, worker.Config{Server: c.URL, ID: "w-open", AllowExec: true})
	start(t, open)
	if te := c.WaitTaskExecutor(t, "exec"); te.GetTaskExecutorId() != "w-open" {
		t.Errorf("exec is offered by %s, want w-open", te.GetTaskExecutorId())
	}
	sub, err := client.Submit(ctx, g, sdk.WithJobID("exec-runs"))
	if err != nil {
		t.Fatalf("Submit once a worker allows exec: %v", err)
	}
	if r := c.Result(t, sub.JobID); r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Errorf("exec job ended %v (%v), want FINISHED on w-open", r.GetStatus(), r.GetFailure())
	}
}

package dispatcher_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/internal/dispatcher"
	"github.com/jobplane/jobplane/server/internal/jobmaster"
	"github.com/jobplane/jobplane/server/internal/jobstatus"
	"github.com/jobplane/jobplane/server/internal/runner"
)

// stuckRunner runs until its leadership ends; recovered, it cannot create
// its JobMaster.
type stuckRunner struct{ recovered bool }

func (r *stuckRunner) Run(ctx context.Context) (jobmaster.Result, error) {
	if r.recovered {
		return jobmaster.Result{Status: jobstatus.Suspended}, fmt.Errorf("%w: no JobMaster", runner.ErrJobMasterInit)
	}
	<-ctx.Done()
	return jobmaster.Result{Status: jobstatus.Suspended}, nil
}

func (r *stuckRunner) Cancel(context.Context) jobplanev1.JobStatus { return jobstatus.Cancelling }
func (r *stuckRunner) JobMaster() *jobmaster.JobMaster             { return nil }

// A recovered job whose JobMaster cannot be created makes the Dispatcher
// step down, leaving the job (plan kept, no result) to another leader.
func TestRecoveryFailureStepsDown(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	store, err := hastore.Open(ctx, hastore.OpenConfig{DataDir: t.TempDir(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	sess, err := store.OpenSession(ctx, hastore.SessionConfig{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close(context.Background())
	d, err := dispatcher.New(dispatcher.Config{
		Store: store, Logger: quiet,
		NewRunner: func(_ *jobplanev1.ExecutionPlan, recovered bool, _ func(*jobplanev1.JobSummary)) (dispatcher.JobRunner, error) {
			return &stuckRunner{recovered: recovered}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	lead := func() (*hastore.Leadership, chan error) {
		l, err := sess.Campaign(ctx, hastore.ElectionJobManager, "")
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- d.Lead(l.Context(), l) }()
		return l, done
	}

	first, done := lead()
	graph := &jobplanev1.JobGraph{Vertices: []*jobplanev1.JobVertex{{Id: "v", Invokable: "noop", Parallelism: 1}}}
	for {
		out, err := d.Submit(ctx, "j", graph)
		if err == nil && out.Created {
			break
		}
		if !errors.Is(err, dispatcher.ErrNotLeading) {
			t.Fatalf("Submit = %v, %v", out, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := first.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("first term: %v", err)
	}

	second, done := lead()
	select {
	case <-second.Done():
	case <-ctx.Done():
		t.Fatal("the Dispatcher kept its leadership after a recovered job's JobMaster failed")
	}
	<-done
	if _, err := store.GetExecutionPlan(ctx, "j"); err != nil {
		t.Errorf("the job's plan is gone: %v", err)
	}
	if _, err := store.GetJobResultEntry(ctx, "j"); !errors.Is(err, hastore.ErrResultNotFound) {
		t.Errorf("the job has a result: %v", err)
	}
}

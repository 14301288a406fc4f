package dispatcher_test

import (
	"context"
	"errors"
	"testing"
	"time"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/sdk/wire/jobstatus"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/internal/dispatcher"
	"github.com/jobplane/jobplane/server/internal/jobmaster"
)

// hurriedRunner reports each Hurry on hurried.
type hurriedRunner struct {
	id      string
	hurried chan<- string
}

func (r *hurriedRunner) Start(ctx context.Context, done func(jobmaster.Result, error)) {
	go func() { <-ctx.Done(); done(jobmaster.Result{Status: jobstatus.Suspended}, nil) }()
}
func (r *hurriedRunner) Hurry()                                      { r.hurried <- r.id }
func (r *hurriedRunner) Cancel(context.Context) jobplanev1.JobStatus { return jobstatus.Cancelling }
func (r *hurriedRunner) JobMaster() *jobmaster.JobMaster             { return nil }

// Hurry reaches the runners of the jobs the leader knows of the ids it
// is given (a TaskExecutor showed slots of theirs), and no others; once
// the term is over, none.
func TestHurryReachesTheRunnersOfKnownJobs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	store, sess := openStore(ctx, t)
	l, err := sess.Campaign(ctx, election.JobManager, "")
	if err != nil {
		t.Fatal(err)
	}
	hurried := make(chan string, 4)
	d, err := dispatcher.New(dispatcher.Config{
		Store: store, Logger: quietLogger(),
		Jobs: jobsOf(store, func(plan *hastorev1.ExecutionPlan, _ bool, _ *hastore.Leadership, _ func(*jobplanev1.JobSummary)) (dispatcher.JobRunner, error) {
			return &hurriedRunner{id: plan.GetJobId(), hurried: hurried}, nil
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	lctx, stop := context.WithCancel(l.Context())
	done := make(chan error, 1)
	go func() { done <- d.Lead(lctx, l) }()
	graph := &jobplanev1.JobGraph{Vertices: []*jobplanev1.JobVertex{{Id: "v", Invokable: "noop", Parallelism: 1}}}
	for _, id := range []string{"x", "y"} {
		for {
			_, err := d.Submit(ctx, id, graph)
			if err == nil {
				break
			}
			if !errors.Is(err, dispatcher.ErrNotLeading) || ctx.Err() != nil {
				t.Fatalf("submit %s: %v", id, err)
			}
			time.Sleep(5 * time.Millisecond) // until Lead has begun
		}
	}
	d.Hurry([]string{"x", "unknown"})
	select {
	case id := <-hurried:
		if id != "x" {
			t.Errorf("hurried %s, want x", id)
		}
	case <-ctx.Done():
		t.Fatal("x's runner was not hurried")
	}
	select {
	case id := <-hurried:
		t.Errorf("hurried %s as well; want x alone", id)
	default:
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	d.Hurry([]string{"x", "y"})
	select {
	case id := <-hurried:
		t.Errorf("hurried %s after the term ended", id)
	default:
	}
}

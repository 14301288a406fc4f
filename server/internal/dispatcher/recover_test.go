package dispatcher_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/sdk/wire/jobstatus"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/hastore/etcdstore"
	"github.com/jobplane/jobplane/server/internal/dispatcher"
	"github.com/jobplane/jobplane/server/internal/jobmaster"
)

// countedRunner runs until its leadership ends and counts its cancels.
type countedRunner struct {
	mu       sync.Mutex
	canceled int
}

func (r *countedRunner) Start(ctx context.Context, done func(jobmaster.Result, error)) {
	go func() { <-ctx.Done(); done(jobmaster.Result{Status: jobstatus.Suspended}, nil) }()
}

func (r *countedRunner) Cancel(context.Context) jobplanev1.JobStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.canceled++
	return jobstatus.Cancelling
}

func (r *countedRunner) JobMaster() *jobmaster.JobMaster { return nil }

// plansOnly is a store that reads plans one job at a time: it hides the
// etcd store's PlanScanner.
type plansOnly struct{ hastore.Store }

// A new leader recovers every job without a result, each with its cancel
// request: a job whose cancellation was recorded is canceled from the
// start and shows the request's record; the others run uncanceled; a job
// with a result does not run. Both ways of reading the plans do this: a
// page at a time (hastore.PlanScanner, the etcd store) and one job at a
// time.
func TestRecoveryTakesCancelRequests(t *testing.T) {
	for name, wrap := range map[string]func(*etcdstore.Store) hastore.Store{
		"scanned":    func(s *etcdstore.Store) hastore.Store { return s },
		"one by one": func(s *etcdstore.Store) hastore.Store { return plansOnly{s} },
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
			etcd, err := etcdstore.Open(ctx, etcdstore.OpenConfig{DataDir: t.TempDir(), Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			defer etcd.Close()
			store := wrap(etcd)
			sess, err := store.OpenSession(ctx, hastore.SessionConfig{TTL: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer sess.Close(context.Background())
			l, err := sess.Campaign(ctx, election.JobManager, "")
			if err != nil {
				t.Fatal(err)
			}
			graph := &jobplanev1.JobGraph{Vertices: []*jobplanev1.JobVertex{{Id: "v", Invokable: "noop", Parallelism: 1}}}
			for _, id := range []string{"a", "b", "c", "done"} {
				if err := store.PutExecutionPlan(ctx, l.Fence(), &hastorev1.ExecutionPlan{JobId: id, JobGraph: graph}); err != nil {
					t.Fatal(err)
				}
			}
			for _, id := range []string{"b", "done"} {
				if err := store.RequestCancel(ctx, l.Fence(), id, &jobplanev1.Cancellation{RequestId: "r-" + id}); err != nil {
					t.Fatal(err)
				}
			}
			if err := store.FinishJob(ctx, l.Fence(), &jobplanev1.JobResult{JobId: "done", Status: jobplanev1.JobStatus_JOB_STATUS_CANCELED}); err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			runners := map[string]*countedRunner{}
			d, err := dispatcher.New(dispatcher.Config{
				Store: store, Logger: quiet,
				Jobs: jobsOf(store, func(plan *hastorev1.ExecutionPlan, _ bool, _ *hastore.Leadership, _ func(*jobplanev1.JobSummary)) (dispatcher.JobRunner, error) {
					mu.Lock()
					defer mu.Unlock()
					r := &countedRunner{}
					runners[plan.GetJobId()] = r
					return r, nil
				}),
			})
			if err != nil {
				t.Fatal(err)
			}
			lctx, stop := context.WithCancel(l.Context())
			done := make(chan error, 1)
			go func() { done <- d.Lead(lctx, l) }()
			defer func() { stop(); <-done }()

			// List waits for the recovery, once the Dispatcher leads.
			var jobs []*jobplanev1.JobSummary
			for {
				if jobs, _, err = d.List(ctx, nil, nil, 10); !errors.Is(err, dispatcher.ErrNotLeading) {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]*jobplanev1.JobSummary{}
			for _, s := range jobs {
				got[s.GetJobId()] = s
			}
			mu.Lock()
			defer mu.Unlock()
			if len(runners) != 3 || runners["done"] != nil {
				t.Errorf("runners started for %v; want a, b and c (done has a result)", runners)
			}
			for _, id := range []string{"a", "b", "c"} {
				r, s := runners[id], got[id]
				if r == nil || s == nil {
					t.Errorf("job %s: runner %v, summary %v; want both", id, r, s)
					continue
				}
				wantCancels, wantStatus, wantRecord := 0, jobstatus.Initializing, ""
				if id == "b" {
					wantCancels, wantStatus, wantRecord = 1, jobstatus.Cancelling, "r-b"
				}
				if r.canceled != wantCancels || s.GetStatus() != wantStatus || s.GetCancellation().GetRequestId() != wantRecord {
					t.Errorf("job %s: %d cancels, %v, record %q; want %d, %v, %q", id, r.canceled, s.GetStatus(), s.GetCancellation().GetRequestId(), wantCancels, wantStatus, wantRecord)
				}
			}
			if s := got["done"]; s.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_CANCELED {
				t.Errorf("job done: %v; want CANCELED, from its result", s)
			}
		})
	}
}

// failingResults is a store whose result listing fails.
type failingResults struct{ hastore.Store }

func (failingResults) ListJobResultEntries(context.Context, hastorev1.JobResultState, string, int) ([]*hastorev1.JobResultEntry, error) {
	return nil, hastore.ErrUnavailable
}

// A recovery whose store reads fail ends the term with an error (the
// jobmanager steps down and campaigns again), not as if the term had
// ended on its own: a leader that stays granted without recovering
// answers nothing but NOT_LEADER.
func TestRecoveryReadFailureEndsTheTermWithAnError(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	store, sess := openStore(ctx, t)
	l, err := sess.Campaign(ctx, election.JobManager, "")
	if err != nil {
		t.Fatal(err)
	}
	d, err := dispatcher.New(dispatcher.Config{
		Store: failingResults{store}, Logger: quietLogger(),
		Jobs: jobsOf(store, func(*hastorev1.ExecutionPlan, bool, *hastore.Leadership, func(*jobplanev1.JobSummary)) (dispatcher.JobRunner, error) {
			return &countedRunner{}, nil
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Lead(l.Context(), l); !errors.Is(err, hastore.ErrUnavailable) {
		t.Errorf("Lead with the result listing failing = %v, want an error wrapping hastore.ErrUnavailable", err)
	}
}

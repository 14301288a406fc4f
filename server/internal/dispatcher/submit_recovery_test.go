package dispatcher_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/sdk/planid"
	"github.com/jobplane/jobplane/sdk/wire/jobstatus"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/hastore/etcdstore"
	"github.com/jobplane/jobplane/server/internal/dispatcher"
)

// heldScan is the etcd store, its plan scan held until release closes.
type heldScan struct {
	*etcdstore.Store
	release chan struct{}
}

func (s heldScan) ScanExecutionPlans(ctx context.Context, after string, limit int) ([]hastore.StoredPlan, error) {
	<-s.release
	return s.Store.ScanExecutionPlans(ctx, after, limit)
}

// heldRead is a store read a job at a time (no PlanScanner), recovery's
// read of job a's plan held until release closes; arrived is closed when
// it comes. A read under a submission's context (submitting) is not held.
type heldRead struct {
	hastore.Store
	arrived, release chan struct{}
	once             *sync.Once
}

type submittingKey struct{}

func (s heldRead) GetExecutionPlan(ctx context.Context, id string) (*hastorev1.ExecutionPlan, error) {
	if id == "a" && ctx.Value(submittingKey{}) == nil {
		s.once.Do(func() { close(s.arrived) })
		<-s.release
	}
	return s.Store.GetExecutionPlan(ctx, id)
}

// A new leader takes submissions once it knows the results, while it
// still reads the plans: a new job is created and runs; a persisted job
// recovery has not read yet is answered as the job it is (not created,
// its run id, its cancel request taken), and a different plan under its
// id is refused; each job gets one runner, whichever of the submission
// and the recovery reads it first. Both ways of reading the plans.
func TestSubmissionsAreTakenWhileRecoveryReadsThePlans(t *testing.T) {
	for name, wrap := range map[string]func(s *etcdstore.Store, arrived, release chan struct{}) hastore.Store{
		"scanned": func(s *etcdstore.Store, arrived, release chan struct{}) hastore.Store {
			close(arrived)
			return heldScan{s, release}
		},
		"one by one": func(s *etcdstore.Store, arrived, release chan struct{}) hastore.Store {
			return heldRead{plansOnly{s}, arrived, release, new(sync.Once)}
		},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			etcd, sess := openStore(ctx, t)
			arrived, release := make(chan struct{}), make(chan struct{})
			store := wrap(etcd, arrived, release)
			l, err := sess.Campaign(ctx, election.JobManager, "")
			if err != nil {
				t.Fatal(err)
			}
			graph := &jobplanev1.JobGraph{Vertices: []*jobplanev1.JobVertex{{Id: "v", Invokable: "noop", Parallelism: 1}}}
			other := &jobplanev1.JobGraph{Vertices: []*jobplanev1.JobVertex{{Id: "w", Invokable: "noop", Parallelism: 1}}}
			for _, id := range []string{"a", "b", "c"} {
				plan := &hastorev1.ExecutionPlan{JobId: id, JobGraph: graph, Digest: planid.Digest(graph), RunId: "run-" + id}
				if err := etcd.PutExecutionPlan(ctx, l.Fence(), plan); err != nil {
					t.Fatal(err)
				}
			}
			if err := etcd.RequestCancel(ctx, l.Fence(), "a", &jobplanev1.Cancellation{RequestId: "r-a"}); err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			runners := map[string]int{}
			d, err := dispatcher.New(dispatcher.Config{
				Store: store, Logger: quietLogger(),
				Jobs: jobsOf(etcd, func(plan *hastorev1.ExecutionPlan, _ bool, _ *hastore.Leadership, _ func(*jobplanev1.JobSummary)) (dispatcher.JobRunner, error) {
					mu.Lock()
					defer mu.Unlock()
					runners[plan.GetJobId()]++
					return &countedRunner{}, nil
				}),
			})
			if err != nil {
				t.Fatal(err)
			}
			lctx, stop := context.WithCancel(l.Context())
			done := make(chan error, 1)
			go func() { done <- d.Lead(lctx, l) }()
			defer func() {
				stop()
				select {
				case <-done:
				case <-ctx.Done():
					// A runner recorded twice keeps the first from ever
					// being started or stopped.
					t.Error("Lead did not return after its term ended: a runner was never stopped")
				}
			}()
			defer func() {
				select {
				case <-release:
				default:
					close(release)
				}
			}()

			// The plans (or a's, which the others' wait for) are held:
			// every answer below comes before recovery read them. A
			// submission that waited for recovery would time out.
			sctx, scancel := context.WithTimeout(context.WithValue(ctx, submittingKey{}, true), 20*time.Second)
			defer scancel()
			var created dispatcher.SubmitOutcome
			for {
				if created, err = d.Submit(sctx, "new", graph); !errors.Is(err, dispatcher.ErrNotLeading) {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			if err != nil || !created.Created {
				t.Fatalf("Submit(new) while recovery reads the plans = %+v, %v; want it created", created, err)
			}
			<-arrived
			got, err := d.Submit(sctx, "a", graph)
			if err != nil || got.Created || got.RunID != "run-a" || got.Status != jobstatus.Cancelling {
				t.Errorf("Submit(a), persisted and canceled, while recovery reads the plans = %+v, %v; want not created, run run-a, CANCELLING", got, err)
			}
			var exists *dispatcher.ExistsError
			if _, err := d.Submit(sctx, "b", other); !errors.As(err, &exists) {
				t.Errorf("Submit(b) of another plan while recovery reads the plans = %v; want an ExistsError", err)
			}
			close(release)

			jobs, _, err := d.List(ctx, nil, nil, 10)
			if err != nil {
				t.Fatal(err)
			}
			if len(jobs) != 4 {
				t.Errorf("after recovery, %d jobs listed: %v; want a, b, c and new", len(jobs), jobs)
			}
			mu.Lock()
			defer mu.Unlock()
			for _, id := range []string{"a", "b", "c", "new"} {
				if runners[id] != 1 {
					t.Errorf("job %s has %d runners (all: %v); want 1", id, runners[id], runners)
				}
			}
		})
	}
}

package runner_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	"github.com/jobplane/jobplane/gen/jobplane/cluster/v1/clusterv1connect"
	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/sdk/wire/jobstatus"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/hastore/etcdstore"
	"github.com/jobplane/jobplane/server/internal/jobmaster"
	"github.com/jobplane/jobplane/server/internal/runner"
)

// blockingRM is a ResourceManager whose RegisterJobMaster reports its
// start on started and returns only once its call is cut off, closing
// cutOff.
type blockingRM struct {
	clusterv1connect.ResourceManagerServiceClient // other calls panic
	started, cutOff                               chan struct{}
}

func (rm *blockingRM) RegisterJobMaster(ctx context.Context, _ *clusterv1.RegisterJobMasterRequest) (*clusterv1.RegisterJobMasterResponse, error) {
	rm.started <- struct{}{}
	<-ctx.Done()
	close(rm.cutOff)
	return nil, ctx.Err()
}

func (rm *blockingRM) DisconnectJobMaster(context.Context, *clusterv1.DisconnectJobMasterRequest) (*clusterv1.DisconnectJobMasterResponse, error) {
	return &clusterv1.DisconnectJobMasterResponse{}, nil
}

// openStore opens an embedded etcd store and a session on it, both closed
// when the test ends.
func openStore(ctx context.Context, t *testing.T, log *slog.Logger) (*etcdstore.Store, hastore.Session) {
	t.Helper()
	store, err := etcdstore.Open(ctx, etcdstore.OpenConfig{DataDir: t.TempDir(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	sess, err := store.OpenSession(ctx, hastore.SessionConfig{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sess.Close(context.Background()) })
	return store, sess
}

// The end of Start's context (the Dispatcher's leadership) stops the
// job's JobMaster while the job's own leadership holds: the JobMaster
// suspends, its call in flight cut off at once (not at the call's own
// deadline of 10s), and the runner passes SUSPENDED and gives the job's
// leadership back.
func TestRunnerContextEndStopsJobMaster(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	bg, cancelBg := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancelBg()
	store, sess := openStore(bg, t, log)

	rm := &blockingRM{started: make(chan struct{}, 1), cutOff: make(chan struct{})}
	router := jobmaster.NewRouter(jobmaster.RouterConfig{})
	var lead *hastore.Leadership
	r, err := runner.New(runner.Config{
		JobID: "j", Plan: &hastorev1.ExecutionPlan{JobId: "j"}, Session: sess, Store: store, Address: "http://127.0.0.1:1", Router: router, Logger: log,
		NewJobMaster: func(_ context.Context, l *hastore.Leadership, _ *hastorev1.ExecutionPlan) (*jobmaster.JobMaster, error) {
			lead = l
			return jobmaster.New(jobmaster.Config{
				JobID: "j", Token: l.Token(), Valid: l.Valid, Address: "http://127.0.0.1:1", Router: router, ResourceManager: rm, Logger: log,
				Graph: &jobplanev1.JobGraph{Vertices: []*jobplanev1.JobVertex{{Id: "v", Invokable: "noop", Parallelism: 1}}},
			})
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	type outcome struct {
		res jobmaster.Result
		err error
	}
	done := make(chan outcome, 1)
	// When done is called, the stopped JobMaster is still the runner's:
	// a reader of the job's output finds where its attempts ran until
	// the Dispatcher has kept them.
	heldAtDone := make(chan bool, 1)
	r.Start(ctx, func(res jobmaster.Result, err error) {
		heldAtDone <- r.JobMaster() != nil
		done <- outcome{res, err}
	})
	select {
	case <-rm.started:
	case <-time.After(30 * time.Second):
		t.Fatal("no JobMaster registered with the ResourceManager within 30s")
	}

	cancel()
	select {
	case o := <-done:
		if o.res.Status != jobstatus.Suspended || o.err != nil {
			t.Errorf("the runner passed %v, %v; want SUSPENDED, no error", o.res.Status, o.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the runner did not end within 5s of its context's end")
	}
	select {
	case <-rm.cutOff:
	default:
		t.Error("the JobMaster ended with its call in flight not cut off")
	}
	if !<-heldAtDone {
		t.Error("the runner dropped its stopped JobMaster before done took its end")
	}
	// Once done returned, the runner lets the JobMaster go.
	for deadline := time.Now().Add(5 * time.Second); r.JobMaster() != nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Error("the runner still has a JobMaster 5s after its end")
			break
		}
	}
	if err := lead.Context().Err(); err == nil {
		t.Error("the job's leadership was not given back")
	}
	if info, err := store.Leader(bg, election.Job("j")); err != nil || !info.Token.IsZero() {
		t.Errorf("the job's leader after the runner ended = %+v, %v; want none", info, err)
	}
}

// waitingRM is a ResourceManager whose RegisterJobMaster reports its
// start on started and returns once its call is cut off.
type waitingRM struct {
	clusterv1connect.ResourceManagerServiceClient // other calls panic
	started                                       chan struct{}
}

func (rm *waitingRM) RegisterJobMaster(ctx context.Context, _ *clusterv1.RegisterJobMasterRequest) (*clusterv1.RegisterJobMasterResponse, error) {
	rm.started <- struct{}{}
	<-ctx.Done()
	return nil, ctx.Err()
}

func (rm *waitingRM) DisconnectJobMaster(context.Context, *clusterv1.DisconnectJobMasterRequest) (*clusterv1.DisconnectJobMasterResponse, error) {
	return &clusterv1.DisconnectJobMasterResponse{}, nil
}

// resultReads counts the store's GetJobResultEntry calls.
type resultReads struct {
	hastore.Store
	n atomic.Int32
}

func (s *resultReads) GetJobResultEntry(ctx context.Context, jobID string) (*hastorev1.JobResultEntry, error) {
	s.n.Add(1)
	return s.Store.GetJobResultEntry(ctx, jobID)
}

// A recovered job's first term looks for no result (the Dispatcher
// listed the results after its grant), while a submitted job that
// campaigns looks once; the recovered job's next term, after its
// leadership was lost, looks again.
func TestRecoveredFirstTermReadsNoResult(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	bg, cancelBg := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancelBg()
	store, sess := openStore(bg, t, log)
	for _, recovered := range []bool{true, false} {
		id := fmt.Sprint("recovered-", recovered)
		counted := &resultReads{Store: store}
		rm := &waitingRM{started: make(chan struct{}, 2)}
		router := jobmaster.NewRouter(jobmaster.RouterConfig{})
		leads := make(chan *hastore.Leadership, 2)
		r, err := runner.New(runner.Config{
			JobID: id, Plan: &hastorev1.ExecutionPlan{JobId: id}, Session: sess, Store: counted, Address: "http://127.0.0.1:1", Router: router, Logger: log, Recovered: recovered,
			NewJobMaster: func(_ context.Context, l *hastore.Leadership, _ *hastorev1.ExecutionPlan) (*jobmaster.JobMaster, error) {
				leads <- l
				return jobmaster.New(jobmaster.Config{
					JobID: id, Token: l.Token(), Valid: l.Valid, Address: "http://127.0.0.1:1", Router: router, ResourceManager: rm, Logger: log,
					Graph: &jobplanev1.JobGraph{Vertices: []*jobplanev1.JobVertex{{Id: "v", Invokable: "noop", Parallelism: 1}}},
				})
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(bg)
		r.Start(ctx, func(jobmaster.Result, error) {})
		term := func(what string) *hastore.Leadership {
			t.Helper()
			select {
			case <-rm.started:
			case <-time.After(30 * time.Second):
				t.Fatalf("%s: no JobMaster registered within 30s", what)
			}
			return <-leads
		}
		first := term("first term")
		want := int32(1)
		if recovered {
			want = 0
		}
		if n := counted.n.Load(); n != want {
			t.Errorf("recovered=%v: the first term read the result %d times, want %d", recovered, n, want)
		}
		if recovered {
			if err := first.Resign(bg); err != nil {
				t.Fatal(err)
			}
			term("second term")
			if n := counted.n.Load(); n != 1 {
				t.Errorf("the recovered job's second term read the result %d times in all, want 1", n)
			}
		}
		cancel()
	}
}

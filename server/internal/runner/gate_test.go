package runner_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"time"
	"weak"

	"google.golang.org/protobuf/proto"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/sdk/wire/jobstatus"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/internal/jobmaster"
	"github.com/jobplane/jobplane/server/internal/runner"
)

// A gate of one seat: the first runner launches, the next wait in order;
// a hurried runner launches at once, past them and without a seat; the
// seat goes to the oldest waiting runner once the first one's term ends;
// and closing the gate ends a runner still waiting, SUSPENDED. A runner
// that waited lets its plan go while it waits, and its JobMaster gets the
// plan read back from the store.
func TestGateAdmitsInOrder(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	store, sess := openStore(ctx, t, log)
	router := jobmaster.NewRouter(jobmaster.RouterConfig{})
	plans := storePlans(ctx, t, store, sess, "a", "b", "c", "d")

	created := make(chan string, 8) // JobMasters asked for, by job
	// proceed lets a job's JobMaster creation fail, and its term end.
	proceed := map[string]chan struct{}{"a": make(chan struct{}), "b": make(chan struct{})}
	ended := map[string]chan jobplanev1.JobStatus{} // each runner's end
	gate := runner.NewGate(1)
	runners := map[string]*runner.Runner{}
	kept := map[string]weak.Pointer[hastorev1.ExecutionPlan]{}
	for _, id := range []string{"a", "b", "c", "d"} {
		plan := proto.CloneOf(plans[id])
		kept[id] = weak.Make(plan)
		r, err := runner.New(runner.Config{
			JobID: id, Plan: plan, Session: sess, Store: store, Address: "http://127.0.0.1:1", Router: router, Logger: log,
			NewJobMaster: func(_ context.Context, _ *hastore.Leadership, plan *hastorev1.ExecutionPlan) (*jobmaster.JobMaster, error) {
				if !proto.Equal(plan, plans[id]) {
					t.Errorf("the JobMaster of %s got the plan %v, want %v", id, plan, plans[id])
				}
				created <- id
				if p := proceed[id]; p != nil {
					<-p
				}
				return nil, errors.New("no JobMaster in this test")
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		runners[id] = r
		ended[id] = make(chan jobplanev1.JobStatus, 1)
	}
	admit := func(id string) {
		runners[id].Admit(ctx, gate, false, func(res jobmaster.Result, _ error) { ended[id] <- res.Status })
	}
	next := func(what string) string {
		t.Helper()
		select {
		case id := <-created:
			return id
		case <-ctx.Done():
			t.Fatalf("%s: no JobMaster asked for", what)
			return ""
		}
	}

	admit("a")
	if got := next("a's launch"); got != "a" {
		t.Fatalf("JobMaster of %s first, want a", got)
	}
	admit("b")
	admit("c")
	if n := gate.Waiting(); n != 2 {
		t.Fatalf("%d runners wait, want b and c", n)
	}
	runtime.GC()
	if kept["b"].Value() != nil {
		t.Error("b's plan is still reachable while b waits for a seat")
	}
	runners["c"].Hurry()
	if got := next("c hurried"); got != "c" {
		t.Fatalf("JobMaster of %s after c was hurried, want c", got)
	}
	if n := gate.Waiting(); n != 1 {
		t.Fatalf("%d runners wait after the hurry, want b alone", n)
	}
	close(proceed["a"]) // a's term ends: its seat goes to b
	if got := next("a's seat freed"); got != "b" {
		t.Fatalf("JobMaster of %s once a's seat was free, want b", got)
	}
	if n := gate.Waiting(); n != 0 {
		t.Fatalf("%d runners wait once b was admitted, want none", n)
	}

	// b holds the seat: d waits, and the gate's close ends it.
	admit("d")
	gate.Close()
	select {
	case got := <-ended["d"]:
		if got != jobstatus.Suspended {
			t.Errorf("d ended %v, want SUSPENDED", got)
		}
	case <-ctx.Done():
		t.Fatal("d did not end once the gate closed")
	}
	close(proceed["b"])
	for _, id := range []string{"a", "b", "c"} {
		if got := <-ended[id]; got != jobstatus.Failed {
			t.Errorf("%s ended %v, want FAILED (its JobMaster could not be created)", id, got)
		}
	}
	select {
	case id := <-created:
		t.Errorf("a JobMaster of %s was asked for after the gate closed", id)
	default:
	}
}

// storePlans writes a plan for each of ids, each of a run of its own,
// under a grant of the jobmanager leadership on sess, and returns them.
func storePlans(ctx context.Context, t *testing.T, store hastore.Store, sess hastore.Session, ids ...string) map[string]*hastorev1.ExecutionPlan {
	t.Helper()
	l, err := sess.Campaign(ctx, election.JobManager, "http://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	plans := map[string]*hastorev1.ExecutionPlan{}
	for _, id := range ids {
		plan := &hastorev1.ExecutionPlan{
			JobId: id, RunId: "run-of-" + id,
			JobGraph: &jobplanev1.JobGraph{Name: id, Vertices: []*jobplanev1.JobVertex{{Id: "v", Invokable: "noop", Parallelism: 1}}},
		}
		if err := store.PutExecutionPlan(ctx, l.Fence(), plan); err != nil {
			t.Fatal(err)
		}
		plans[id] = plan
	}
	return plans
}

// A runner that waited reads its plan back, and fails its job, creating no
// JobMaster, if the store holds a plan of another run of the job: it
// never runs a graph it was not given.
func TestGateReadBackOfAnotherRunFails(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	store, sess := openStore(ctx, t, log)
	router := jobmaster.NewRouter(jobmaster.RouterConfig{})
	plans := storePlans(ctx, t, store, sess, "a", "x")
	created := make(chan string, 2)
	release := make(chan struct{})
	defer close(release)
	newRunner := func(plan *hastorev1.ExecutionPlan) *runner.Runner {
		r, err := runner.New(runner.Config{
			JobID: plan.GetJobId(), Plan: plan, Session: sess, Store: store, Address: "http://127.0.0.1:1", Router: router, Logger: log,
			NewJobMaster: func(_ context.Context, _ *hastore.Leadership, plan *hastorev1.ExecutionPlan) (*jobmaster.JobMaster, error) {
				created <- plan.GetJobId()
				<-release
				return nil, errors.New("no JobMaster in this test")
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	gate := runner.NewGate(1)
	a := newRunner(plans["a"])
	a.Admit(ctx, gate, false, func(jobmaster.Result, error) {})
	if got := <-created; got != "a" {
		t.Fatalf("JobMaster of %s, want a", got)
	}
	// x's runner was given a plan of a run the store does not hold.
	stale := proto.CloneOf(plans["x"])
	stale.RunId = "an-earlier-run"
	x := newRunner(stale)
	ended := make(chan jobmaster.Result, 1)
	x.Admit(ctx, gate, false, func(res jobmaster.Result, _ error) { ended <- res })
	x.Hurry()
	select {
	case res := <-ended:
		if res.Status != jobstatus.Failed || !strings.Contains(res.Failure.GetMessage(), "another run") {
			t.Errorf("x ended %v (%v), want FAILED for a plan of another run", res.Status, res.Failure.GetMessage())
		}
	case id := <-created:
		t.Fatalf("a JobMaster of %s was created from the plan of another run", id)
	case <-ctx.Done():
		t.Fatal("x did not end")
	}
}

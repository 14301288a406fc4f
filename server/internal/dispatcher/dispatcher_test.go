package dispatcher_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
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
	"github.com/jobplane/jobplane/server/internal/runner"
)

// stuckRunner runs until its leadership ends; recovered, it cannot create
// its JobMaster.
type stuckRunner struct{ recovered bool }

func (r *stuckRunner) Start(ctx context.Context, done func(jobmaster.Result, error)) {
	go func() { done(r.run(ctx)) }()
}

func (r *stuckRunner) run(ctx context.Context) (jobmaster.Result, error) {
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
	store, sess := openStore(ctx, t)
	d, err := dispatcher.New(dispatcher.Config{
		Store: store, Logger: quietLogger(),
		Jobs: jobsOf(store, func(_ *hastorev1.ExecutionPlan, recovered bool, _ *hastore.Leadership, _ func(*jobplanev1.JobSummary)) (dispatcher.JobRunner, error) {
			return &stuckRunner{recovered: recovered}, nil
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	lead := func() (*hastore.Leadership, chan error) {
		l, err := sess.Campaign(ctx, election.JobManager, "")
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

// scriptedRunner runs a job until the test ends it, reporting the status
// changes the test makes.
type scriptedRunner struct {
	onStatus func(*jobplanev1.JobSummary)
	end      chan jobplanev1.JobStatus
}

func (r *scriptedRunner) Start(ctx context.Context, done func(jobmaster.Result, error)) {
	go func() { done(r.run(ctx)) }()
}

func (r *scriptedRunner) run(ctx context.Context) (jobmaster.Result, error) {
	select {
	case st := <-r.end:
		return jobmaster.Result{Status: st}, nil
	case <-ctx.Done():
		return jobmaster.Result{Status: jobstatus.Suspended}, nil
	}
}

func (r *scriptedRunner) Cancel(context.Context) jobplanev1.JobStatus { return jobstatus.Cancelling }
func (r *scriptedRunner) JobMaster() *jobmaster.JobMaster             { return nil }

// listIDs returns the ids ListJobs lists in statuses, in order.
func listIDs(ctx context.Context, t *testing.T, d *dispatcher.Dispatcher, statuses ...jobplanev1.JobStatus) []string {
	t.Helper()
	jobs, _, err := d.List(ctx, statuses, nil, 100)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	ids := make([]string, len(jobs))
	for i, s := range jobs {
		ids[i] = s.GetJobId()
	}
	return ids
}

// counts returns running, finished, canceled and failed of Overview.
func counts(ctx context.Context, t *testing.T, d *dispatcher.Dispatcher) [4]int32 {
	t.Helper()
	o, err := d.Overview(ctx)
	if err != nil {
		t.Fatalf("Overview: %v", err)
	}
	return [4]int32{o.GetRunningJobCount(), o.GetFinishedJobCount(), o.GetCanceledJobCount(), o.GetFailedJobCount()}
}

// The Dispatcher keeps its index with its jobs through a job's whole life:
// accepted at submission (not when the plan cannot be stored), moved at
// each status change and at its result, rebuilt by recovery, and rid of a
// result that retention deleted.
func TestQueriesFollowJobs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	store, err := etcdstore.Open(ctx, etcdstore.OpenConfig{DataDir: t.TempDir(), Logger: quiet, MaxPlanBytes: 1024})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	sess, err := store.OpenSession(ctx, hastore.SessionConfig{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close(context.Background())
	var mu sync.Mutex
	runners := map[string]*scriptedRunner{}
	eventually := func(what string, ok func() bool) {
		t.Helper()
		for !ok() {
			select {
			case <-ctx.Done():
				t.Fatalf("%s: not within the deadline", what)
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	// term leads with a new Dispatcher, once it answers as the leader,
	// until the returned function resigns.
	term := func(retention time.Duration) (*dispatcher.Dispatcher, func()) {
		d, err := dispatcher.New(dispatcher.Config{
			Store: store, Logger: quiet, ResultRetention: retention,
			Jobs: jobsOf(store, func(plan *hastorev1.ExecutionPlan, _ bool, _ *hastore.Leadership, onStatus func(*jobplanev1.JobSummary)) (dispatcher.JobRunner, error) {
				r := &scriptedRunner{onStatus: onStatus, end: make(chan jobplanev1.JobStatus, 1)}
				mu.Lock()
				runners[plan.GetJobId()] = r
				mu.Unlock()
				return r, nil
			}),
		})
		if err != nil {
			t.Fatal(err)
		}
		l, err := sess.Campaign(ctx, election.JobManager, "")
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- d.Lead(l.Context(), l) }()
		eventually("leading", func() bool { _, err := d.Overview(ctx); return err == nil })
		return d, func() {
			if err := l.Resign(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatalf("term: %v", err)
			}
		}
	}
	runner := func(id string) *scriptedRunner {
		mu.Lock()
		defer mu.Unlock()
		return runners[id]
	}

	d, resign := term(0)
	graph := &jobplanev1.JobGraph{Vertices: []*jobplanev1.JobVertex{{Id: "v", Invokable: "noop", Parallelism: 1}}}
	for _, id := range []string{"a", "b", "c"} {
		if out, err := d.Submit(ctx, id, graph); err != nil || !out.Created {
			t.Fatalf("Submit(%s) = %v, %v", id, out, err)
		}
	}
	huge := &jobplanev1.JobGraph{Name: strings.Repeat("x", 2048), Vertices: graph.Vertices}
	if _, err := d.Submit(ctx, "huge", huge); err == nil {
		t.Fatal("a plan over the store's limit was accepted")
	}
	if got, want := listIDs(ctx, t, d), []string{"c", "b", "a"}; !slices.Equal(got, want) {
		t.Errorf("after submissions: List = %v, want %v", got, want)
	}
	runner("a").onStatus(&jobplanev1.JobSummary{JobId: "a", Status: jobstatus.Running})
	if got, want := listIDs(ctx, t, d, jobstatus.Running), []string{"a"}; !slices.Equal(got, want) {
		t.Errorf("after a status change: List(RUNNING) = %v, want %v", got, want)
	}
	runner("b").end <- jobstatus.Finished
	eventually("b's result", func() bool { return counts(ctx, t, d) == [4]int32{2, 1, 0, 0} })
	if got, want := listIDs(ctx, t, d, jobstatus.Finished), []string{"b"}; !slices.Equal(got, want) {
		t.Errorf("after a result: List(FINISHED) = %v, want %v", got, want)
	}
	resign()

	// Recovery: b from its result, a and c from their plans.
	d, resign = term(0)
	if got, want := counts(ctx, t, d), [4]int32{2, 1, 0, 0}; got != want {
		t.Errorf("after recovery: running, finished, canceled, failed = %v, want %v", got, want)
	}
	if got, want := listIDs(ctx, t, d), []string{"c", "b", "a"}; !slices.Equal(got, want) {
		t.Errorf("after recovery: List = %v, want %v", got, want)
	}
	resign()

	// Retention deletes b's result, and the Dispatcher forgets b.
	d, resign = term(time.Millisecond)
	eventually("b's deletion", func() bool { return counts(ctx, t, d) == [4]int32{2, 0, 0, 0} })
	if got, want := listIDs(ctx, t, d), []string{"c", "a"}; !slices.Equal(got, want) {
		t.Errorf("after retention: List = %v, want %v", got, want)
	}
	resign()
}

// testJobs persists plans in a store and creates runners with a test's
// function.
type testJobs struct {
	store     hastore.Store
	newRunner func(*hastorev1.ExecutionPlan, bool, *hastore.Leadership, func(*jobplanev1.JobSummary)) (dispatcher.JobRunner, error)
}

// jobsOf returns the Jobs of a test: plans put into store, runners made by
// newRunner.
func jobsOf(store hastore.Store, newRunner func(*hastorev1.ExecutionPlan, bool, *hastore.Leadership, func(*jobplanev1.JobSummary)) (dispatcher.JobRunner, error)) testJobs {
	return testJobs{store: store, newRunner: newRunner}
}

func (j testJobs) PersistPlan(ctx context.Context, f hastore.Fence, plan *hastorev1.ExecutionPlan, _ bool) (*hastore.Leadership, error) {
	return nil, j.store.PutExecutionPlan(ctx, f, plan)
}

func (j testJobs) NewRunner(plan *hastorev1.ExecutionPlan, recovered bool, granted *hastore.Leadership, onStatus func(*jobplanev1.JobSummary)) (dispatcher.JobRunner, error) {
	return j.newRunner(plan, recovered, granted, onStatus)
}

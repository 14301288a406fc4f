package dispatcher_test

import (
	"context"
	"errors"
	"slices"
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

// holdingTEs are TaskExecutors whose slot reports show a fixed set of
// jobs holding slots.
type holdingTEs struct {
	refusingTEs
	holding []string
}

func (h *holdingTEs) JobsHoldingSlots() []string { return h.holding }

// startedRunner calls started with its id when it starts.
type startedRunner struct {
	id      string
	started func(id string)
}

func (r *startedRunner) Start(ctx context.Context, done func(jobmaster.Result, error)) {
	r.started(r.id)
	go func() { <-ctx.Done(); done(jobmaster.Result{Status: jobstatus.Suspended}, nil) }()
}

func (r *startedRunner) Cancel(context.Context) jobplanev1.JobStatus { return jobstatus.Cancelling }
func (r *startedRunner) JobMaster() *jobmaster.JobMaster             { return nil }

// A new leader starts first the runners of the jobs that hold slots on
// the TaskExecutors (their tasks may be running, waiting to be adopted),
// and the others in id order once each of those reported its JobMaster's
// status; it knows every recovered job before it starts those others: it
// answers for a job whose runner has not started.
func TestRecoveryStartsTheJobsHoldingSlotsFirst(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	store, sess := openStore(ctx, t)
	l, err := sess.Campaign(ctx, election.JobManager, "")
	if err != nil {
		t.Fatal(err)
	}
	graph := &jobplanev1.JobGraph{Vertices: []*jobplanev1.JobVertex{{Id: "v", Invokable: "noop", Parallelism: 1}}}
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		if err := store.PutExecutionPlan(ctx, l.Fence(), &hastorev1.ExecutionPlan{JobId: id, JobGraph: graph}); err != nil {
			t.Fatal(err)
		}
	}

	var (
		mu       sync.Mutex
		order    []string
		release  = make(chan struct{})
		onStatus = map[string]func(*jobplanev1.JobSummary){}
	)
	startedIDs := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(order)
	}
	await := func(what string, cond func([]string) bool) {
		t.Helper()
		for !cond(startedIDs()) {
			select {
			case <-ctx.Done():
				t.Fatalf("%s: runners started: %v", what, startedIDs())
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	started := func(id string) {
		mu.Lock()
		order = append(order, id)
		mu.Unlock()
		if id == "a" {
			<-release // the first of the jobs holding no slots
		}
	}
	d, err := dispatcher.New(dispatcher.Config{
		Store: store, Logger: quietLogger(), TaskExecutors: &holdingTEs{holding: []string{"d", "gone", "b"}},
		Jobs: jobsOf(store, func(plan *hastorev1.ExecutionPlan, _ bool, _ *hastore.Leadership, report func(*jobplanev1.JobSummary)) (dispatcher.JobRunner, error) {
			mu.Lock()
			onStatus[plan.GetJobId()] = report
			mu.Unlock()
			return &startedRunner{id: plan.GetJobId(), started: started}, nil
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	lctx, stop := context.WithCancel(l.Context())
	done := make(chan error, 1)
	go func() { done <- d.Lead(lctx, l) }()
	defer func() { stop(); <-done }()

	// b and d start, and the others wait until both report a status;
	// meanwhile the leader answers for e, whose runner has not started.
	await("b and d", func(ids []string) bool { return slices.Contains(ids, "b") && slices.Contains(ids, "d") })
	for {
		_, err := d.Owner(ctx, "e")
		if !errors.Is(err, dispatcher.ErrNotLeading) {
			if err != nil {
				t.Fatalf("Owner(e) while the runners start: %v", err)
			}
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the leader did not answer for a job whose runner had not started")
		case <-time.After(5 * time.Millisecond):
		}
	}
	if ids := startedIDs(); len(ids) != 2 {
		t.Errorf("runners started before b's and d's JobMasters reported: %v; want only b and d", ids)
	}
	mu.Lock()
	reportB, reportD := onStatus["b"], onStatus["d"]
	mu.Unlock()
	reportB(&jobplanev1.JobSummary{JobId: "b", Status: jobstatus.Running})
	reportD(&jobplanev1.JobSummary{JobId: "d", Status: jobstatus.Running})
	// a's start is held: e's runner has not started, and the leader
	// answers for it.
	await("a", func(ids []string) bool { return slices.Contains(ids, "a") })
	if _, err := d.Owner(ctx, "e"); err != nil {
		t.Errorf("Owner(e) while a's runner starts: %v", err)
	}
	if slices.Contains(startedIDs(), "e") {
		t.Errorf("runners started before a's start returned: %v; want e not among them", startedIDs())
	}
	close(release)
	await("all five", func(ids []string) bool { return len(ids) == 5 })
	order = startedIDs()
	if first := slices.Sorted(slices.Values(order[:2])); !slices.Equal(first, []string{"b", "d"}) || !slices.Equal(order[2:], []string{"a", "c", "e"}) {
		t.Errorf("runners started in the order %v; want b and d (holding slots) first, then a, c, e", order)
	}
}

// heldPages is the etcd store, its plan scan's page after the job
// after held until release closes; arrived is closed when that page is
// asked for.
type heldPages struct {
	*etcdstore.Store
	after            string
	arrived, release chan struct{}
}

func (s heldPages) ScanExecutionPlans(ctx context.Context, after string, limit int) ([]hastore.StoredPlan, error) {
	if after == s.after {
		close(s.arrived)
		select {
		case <-s.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return s.Store.ScanExecutionPlans(ctx, after, limit)
}

// A recovery that reads the plans a page at a time starts the jobs that
// hold slots as their page is read, before it has read the others: their
// tasks wait to be adopted within the task lease, which a scan of a
// hundred thousand plans would take seconds of. The jobs holding no
// slots start once those reported.
func TestRecoveryStartsTheJobsHoldingSlotsAsTheirPageIsRead(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	etcd, sess := openStore(ctx, t)
	l, err := sess.Campaign(ctx, election.JobManager, "")
	if err != nil {
		t.Fatal(err)
	}
	graph := &jobplanev1.JobGraph{Vertices: []*jobplanev1.JobVertex{{Id: "v", Invokable: "noop", Parallelism: 1}}}
	for _, id := range []string{"a", "b", "c", "d", "e", "f"} {
		if err := etcd.PutExecutionPlan(ctx, l.Fence(), &hastorev1.ExecutionPlan{JobId: id, JobGraph: graph}); err != nil {
			t.Fatal(err)
		}
	}
	dispatcher.SetRecoveryPage(t, 2) // pages a b, c d, e f
	store := heldPages{Store: etcd, after: "b", arrived: make(chan struct{}), release: make(chan struct{})}
	var (
		mu    sync.Mutex
		order []string
	)
	startedIDs := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(order)
	}
	d, err := dispatcher.New(dispatcher.Config{
		Store: store, Logger: quietLogger(), TaskExecutors: &holdingTEs{holding: []string{"e", "b"}},
		Jobs: jobsOf(etcd, func(plan *hastorev1.ExecutionPlan, _ bool, _ *hastore.Leadership, report func(*jobplanev1.JobSummary)) (dispatcher.JobRunner, error) {
			id := plan.GetJobId()
			return &startedRunner{id: id, started: func(string) {
				mu.Lock()
				order = append(order, id)
				mu.Unlock()
				// Its JobMaster reports at once.
				report(&jobplanev1.JobSummary{JobId: id, Status: jobstatus.Running})
			}}, nil
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	lctx, stop := context.WithCancel(l.Context())
	done := make(chan error, 1)
	go func() { done <- d.Lead(lctx, l) }()
	defer func() { stop(); <-done }()

	// The second page is held: b's runner starts all the same.
	select {
	case <-store.arrived:
	case <-ctx.Done():
		t.Fatal("the recovery did not ask for the second page")
	}
	for wait := time.Now().Add(20 * time.Second); !slices.Contains(startedIDs(), "b"); {
		if time.Now().After(wait) {
			t.Fatalf("while the second page of plans is held, the runners started are %v; want b's (it holds slots, and its page is read)", startedIDs())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if ids := startedIDs(); !slices.Equal(ids, []string{"b"}) {
		t.Errorf("while the second page of plans is held, the runners started are %v; want only b's", ids)
	}
	close(store.release)
	for len(startedIDs()) < 6 {
		select {
		case <-ctx.Done():
			t.Fatalf("runners started: %v; want all six", startedIDs())
		case <-time.After(5 * time.Millisecond):
		}
	}
	if ids := startedIDs(); !slices.Equal(ids[:2], []string{"b", "e"}) || !slices.Equal(ids[2:], []string{"a", "c", "d", "f"}) {
		t.Errorf("runners started in the order %v; want b and e (holding slots, as their pages are read), then a, c, d, f", ids)
	}
}

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

// startedRunner records its start in a shared list, and the first one
// started waits for the test's release before it returns from Start.
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

// A new leader knows every recovered job before it starts their runners:
// it answers for a job whose runner has not started. It then starts first
// the runners of the jobs that hold slots on the TaskExecutors (their
// tasks may be running, waiting to be adopted), and the others in id
// order once each of those reported its JobMaster's status.
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
		first := len(order) == 1
		mu.Unlock()
		if first {
			<-release
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

	// The first runner's start is held: e's runner has not started, and
	// the leader answers for it.
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
	startedBefore := startedIDs()
	close(release)
	if slices.Contains(startedBefore, "e") {
		t.Errorf("runners started before the release: %v; want e not among them", startedBefore)
	}

	// b and d start, and the others wait until both report a status.
	await("b and d", func(ids []string) bool { return slices.Contains(ids, "b") && slices.Contains(ids, "d") })
	if ids := startedIDs(); len(ids) != 2 {
		t.Errorf("runners started before b's and d's JobMasters reported: %v; want only b and d", ids)
	}
	mu.Lock()
	reportB, reportD := onStatus["b"], onStatus["d"]
	mu.Unlock()
	reportB(&jobplanev1.JobSummary{JobId: "b", Status: jobstatus.Running})
	reportD(&jobplanev1.JobSummary{JobId: "d", Status: jobstatus.Running})
	await("all five", func(ids []string) bool { return len(ids) == 5 })
	order = startedIDs()
	if first := slices.Sorted(slices.Values(order[:2])); !slices.Equal(first, []string{"b", "d"}) || !slices.Equal(order[2:], []string{"a", "c", "e"}) {
		t.Errorf("runners started in the order %v; want b and d (holding slots) first, then a, c, e", order)
	}
}

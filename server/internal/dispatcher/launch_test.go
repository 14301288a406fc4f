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

// heldPages is the etcd store as a hastore.PlanScanner that reads no
// plans by id (no hastore.PlanReader), its plan scan's page after the
// job after held until release closes; arrived is closed when that page
// is asked for.
type heldPages struct {
	hastore.Store
	etcd             *etcdstore.Store
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
	return s.etcd.ScanExecutionPlans(ctx, after, limit)
}

// heldReader is heldPages that also reads plans by id, as the etcd store
// does (hastore.PlanReader).
type heldReader struct{ heldPages }

func (s heldReader) ReadExecutionPlans(ctx context.Context, ids []string) ([]hastore.StoredPlan, error) {
	return s.etcd.ReadExecutionPlans(ctx, ids)
}

// changingTEs are TaskExecutors whose jobs holding slots change.
type changingTEs struct {
	refusingTEs
	mu      sync.Mutex
	holding []string
}

func (c *changingTEs) JobsHoldingSlots() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.holding)
}

func (c *changingTEs) hold(ids ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.holding = append(c.holding, ids...)
}

// A recovery that reads the plans a page at a time starts the jobs that
// hold slots as their page is read, before it has read the others: their
// tasks wait to be adopted within the task lease, which a scan of a
// hundred thousand plans would take seconds of. The jobs holding no
// slots start once those reported.
func TestRecoveryStartsTheJobsHoldingSlotsAsTheirPageIsRead(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	etcd, l := sixPlans(ctx, t)
	store := heldPages{Store: etcd, etcd: etcd, after: "b", arrived: make(chan struct{}), release: make(chan struct{})}
	jobs, startedIDs := reportingRunners(etcd)
	d, err := dispatcher.New(dispatcher.Config{
		Store: store, Logger: quietLogger(), TaskExecutors: &holdingTEs{holding: []string{"e", "b"}}, Jobs: jobs,
	})
	if err != nil {
		t.Fatal(err)
	}
	leadUntilEnd(t, d, l)

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

// A recovery from a store that also reads plans by id starts the jobs
// holding slots before its scan comes to them: those the TaskExecutors
// showed before it began, and those of a TaskExecutor that registers
// while it runs (Hurry), while the scan's first page is held. The jobs
// holding no slots start once those reported.
func TestRecoveryStartsTheJobsHoldingSlotsAheadOfTheScan(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	etcd, l := sixPlans(ctx, t)
	store := heldReader{heldPages{Store: etcd, etcd: etcd, after: "", arrived: make(chan struct{}), release: make(chan struct{})}}
	tes := &changingTEs{holding: []string{"e", "b"}}
	jobs, startedIDs := reportingRunners(etcd)
	d, err := dispatcher.New(dispatcher.Config{Store: store, Logger: quietLogger(), TaskExecutors: tes, Jobs: jobs})
	if err != nil {
		t.Fatal(err)
	}
	leadUntilEnd(t, d, l)
	waitStarted := func(n int, what string) []string {
		t.Helper()
		for wait := time.Now().Add(20 * time.Second); len(startedIDs()) < n; {
			if time.Now().After(wait) {
				t.Fatalf("%s: the runners started are %v", what, startedIDs())
			}
			time.Sleep(5 * time.Millisecond)
		}
		return startedIDs()
	}

	select {
	case <-store.arrived:
	case <-ctx.Done():
		t.Fatal("the recovery did not ask for the first page")
	}
	// The first page is held: b and e start all the same.
	if ids := waitStarted(2, "while the first page is held"); !sameSet(ids, []string{"b", "e"}) {
		t.Errorf("while the first page of plans is held, the runners started are %v; want b's and e's", ids)
	}
	// A TaskExecutor that registers now shows d's slots.
	tes.hold("d")
	d.Hurry([]string{"d"})
	if ids := waitStarted(3, "after d's TaskExecutor registered"); ids[2] != "d" {
		t.Errorf("after d's TaskExecutor registered, the runners started are %v; want d's third", ids)
	}
	close(store.release)
	if ids := waitStarted(6, "after the scan"); !slices.Equal(ids[3:], []string{"a", "c", "f"}) {
		t.Errorf("runners started in the order %v; want b, e and d (holding slots, ahead of the scan), then a, c, f", ids)
	}
}

// chunkReader is heldReader whose read by id of the plans of the jobs
// holding slots is held, while the read names job hold, until release
// closes; reading is closed when that read is asked for.
type chunkReader struct {
	heldReader
	hold             string
	reading, release chan struct{}
}

func (s chunkReader) ReadExecutionPlans(ctx context.Context, ids []string) ([]hastore.StoredPlan, error) {
	if slices.Contains(ids, s.hold) {
		close(s.reading)
		select {
		case <-s.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return s.heldReader.ReadExecutionPlans(ctx, ids)
}

// The plans of the jobs holding slots are read a chunk at a time, and
// each chunk's runners start as soon as it is read: while the read of
// the chunk holding e is held, b's runner (the first chunk) has started.
func TestRecoveryStartsTheHoldersOfEachChunkAsItIsRead(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dispatcher.SetHolderChunk(t, 1)
	etcd, l := sixPlans(ctx, t)
	store := chunkReader{
		heldReader: heldReader{heldPages{Store: etcd, etcd: etcd, after: "", arrived: make(chan struct{}), release: make(chan struct{})}},
		hold:       "e", reading: make(chan struct{}), release: make(chan struct{}),
	}
	jobs, startedIDs := reportingRunners(etcd)
	d, err := dispatcher.New(dispatcher.Config{Store: store, Logger: quietLogger(), TaskExecutors: &holdingTEs{holding: []string{"b", "e"}}, Jobs: jobs})
	if err != nil {
		t.Fatal(err)
	}
	leadUntilEnd(t, d, l)
	select {
	case <-store.reading:
	case <-ctx.Done():
		t.Fatal("the recovery did not read e's plan")
	}
	for wait := time.Now().Add(20 * time.Second); !slices.Contains(startedIDs(), "b"); {
		if time.Now().After(wait) {
			t.Fatalf("while the read of e's plan is held, the runners started are %v; want b's (its chunk was read)", startedIDs())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if ids := startedIDs(); !slices.Equal(ids, []string{"b"}) {
		t.Errorf("while the read of e's plan and the scan are held, the runners started are %v; want only b's", ids)
	}
	close(store.release)
	close(store.heldPages.release)
	for len(startedIDs()) < 6 {
		select {
		case <-ctx.Done():
			t.Fatalf("runners started: %v; want all six", startedIDs())
		case <-time.After(5 * time.Millisecond):
		}
	}
	if ids := startedIDs(); !slices.Equal(ids[:2], []string{"b", "e"}) {
		t.Errorf("runners started in the order %v; want b, then e (holding slots, chunk by chunk), then the others", ids)
	}
}

// sameSet reports whether a and b hold the same strings, in any order.
func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// pageLog is heldReader that also notes, in a shared log, each page its
// scan is asked for ("scan after <id>").
type pageLog struct {
	heldReader
	note func(string)
}

func (s pageLog) ScanExecutionPlans(ctx context.Context, after string, limit int) ([]hastore.StoredPlan, error) {
	s.note("scan after " + after)
	return s.heldReader.ScanExecutionPlans(ctx, after, limit)
}

// While the jobs holding slots that recovery started ahead of its scan
// have not reported their JobMasters, the scan reads no further page:
// on a small machine its work would slow their campaigns, and their
// tasks must be adopted within the task lease.
func TestRecoveryScanWaitsForTheJobsHoldingSlots(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	etcd, l := sixPlans(ctx, t)
	var (
		mu      sync.Mutex
		log     []string
		started = make(chan string, 6)
		reports = map[string]func(*jobplanev1.JobSummary){}
	)
	note := func(s string) {
		mu.Lock()
		log = append(log, s)
		mu.Unlock()
	}
	// No page is held ("-" is no job's id).
	store := pageLog{heldReader{heldPages{Store: etcd, etcd: etcd, after: "-"}}, note}
	d, err := dispatcher.New(dispatcher.Config{
		Store: store, Logger: quietLogger(), TaskExecutors: &changingTEs{holding: []string{"e", "b"}},
		Jobs: jobsOf(etcd, func(plan *hastorev1.ExecutionPlan, _ bool, _ *hastore.Leadership, report func(*jobplanev1.JobSummary)) (dispatcher.JobRunner, error) {
			id := plan.GetJobId()
			return &startedRunner{id: id, started: func(string) {
				mu.Lock()
				reports[id] = report
				mu.Unlock()
				started <- id
			}}, nil
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	leadUntilEnd(t, d, l)
	next := func() string {
		t.Helper()
		select {
		case id := <-started:
			return id
		case <-ctx.Done():
			t.Fatal("a runner did not start")
			return ""
		}
	}

	// b and e start ahead of the scan, and do not report.
	if got := []string{next(), next()}; !sameSet(got, []string{"b", "e"}) {
		t.Fatalf("runners started ahead of the scan: %v; want b's and e's", got)
	}
	// A while later, b and e report, and only then may the scan ask for
	// a page after the first (which it may have asked for before they
	// started).
	select {
	case <-time.After(200 * time.Millisecond):
	case <-ctx.Done():
	}
	mu.Lock()
	log = append(log, "reported")
	for _, id := range []string{"b", "e"} {
		reports[id](&jobplanev1.JobSummary{JobId: id, Status: jobstatus.Running})
	}
	mu.Unlock()
	for range 4 { // a, c, d, f
		next()
	}
	mu.Lock()
	got := slices.Clone(log)
	mu.Unlock()
	later := slices.DeleteFunc(slices.Clone(got), func(s string) bool { return s == "scan after " })
	if want := []string{"reported", "scan after b", "scan after d", "scan after f"}; !slices.Contains(got, "scan after ") || !slices.Equal(later, want) {
		t.Errorf("the scan's pages and the holders' reports came in the order %q; want the first page at any time, and the others after the reports: %q", got, want)
	}
}

// sixPlans opens a store holding the plans of jobs a to f, which
// recovery reads two per page (a b, c d, e f), and returns the grant of
// jobmanager that wrote them.
func sixPlans(ctx context.Context, t *testing.T) (*etcdstore.Store, *hastore.Leadership) {
	t.Helper()
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
	dispatcher.SetRecoveryPage(t, 2)
	return etcd, l
}

// leadUntilEnd has d lead under l until the test ends.
func leadUntilEnd(t *testing.T, d *dispatcher.Dispatcher, l *hastore.Leadership) {
	lctx, stop := context.WithCancel(l.Context())
	done := make(chan error, 1)
	go func() { done <- d.Lead(lctx, l) }()
	t.Cleanup(func() { stop(); <-done })
}

// reportingRunners makes runners whose JobMasters report RUNNING as soon
// as they start, and returns what lists the jobs started so far, in order.
func reportingRunners(store hastore.Store) (testJobs, func() []string) {
	var (
		mu    sync.Mutex
		order []string
	)
	jobs := jobsOf(store, func(plan *hastorev1.ExecutionPlan, _ bool, _ *hastore.Leadership, report func(*jobplanev1.JobSummary)) (dispatcher.JobRunner, error) {
		id := plan.GetJobId()
		return &startedRunner{id: id, started: func(string) {
			mu.Lock()
			order = append(order, id)
			mu.Unlock()
			report(&jobplanev1.JobSummary{JobId: id, Status: jobstatus.Running})
		}}, nil
	})
	return jobs, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(order)
	}
}

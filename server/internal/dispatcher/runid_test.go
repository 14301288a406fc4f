package dispatcher_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
	"github.com/jobplane/jobplane/sdk/wire/jobstatus"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/hastore/etcdstore"
	"github.com/jobplane/jobplane/server/internal/dispatcher"
	"github.com/jobplane/jobplane/server/internal/jobmaster"
)

// dirtyStore refuses to delete results while dirty is set, as a store
// does while a job's cleanup is not done.
type dirtyStore struct {
	hastore.Store
	dirty atomic.Bool

	mu sync.Mutex
	// stale, if set, is listed with the clean results, as a listing made
	// before the result's deletion would.
	stale *hastorev1.JobResultEntry
}

func (s *dirtyStore) ListJobResultEntries(ctx context.Context, state hastorev1.JobResultState, after string, limit int) ([]*hastorev1.JobResultEntry, error) {
	entries, err := s.Store.ListJobResultEntries(ctx, state, after, limit)
	s.mu.Lock()
	defer s.mu.Unlock()
	if state == hastorev1.JobResultState_JOB_RESULT_STATE_CLEAN && s.stale != nil {
		entries = append(entries, s.stale)
	}
	return entries, err
}

func (s *dirtyStore) DeleteJobResultEntry(ctx context.Context, f hastore.Fence, jobID string) error {
	if s.dirty.Load() {
		return hastore.ErrResultDirty
	}
	return s.Store.DeleteJobResultEntry(ctx, f, jobID)
}

// refusingTEs is a cluster whose TaskExecutors offer no invokable while
// refuse is set.
type refusingTEs struct{ refuse atomic.Bool }

func (*refusingTEs) ListTaskExecutors(string, int) ([]*jobplanev1.TaskExecutorInfo, bool) {
	return nil, false
}
func (*refusingTEs) TaskExecutorAddress(string) (string, bool) { return "", false }
func (*refusingTEs) SlotOverview() (int, int, int)             { return 1, 1, 1 }
func (*refusingTEs) JobsHoldingSlots() []string                { return nil }
func (r *refusingTEs) NotOffered(vs []*jobplanev1.JobVertex) ([]int, []string) {
	if !r.refuse.Load() {
		return nil, nil
	}
	return []int{0}, []string{"other"}
}

// runHarness runs Dispatchers over one store, with scripted runners.
type runHarness struct {
	t     *testing.T
	ctx   context.Context
	store *dirtyStore
	sess  hastore.Session

	tes       refusingTEs
	retention time.Duration
	mu        sync.Mutex
	runners   map[string]*scriptedRunner // by run id
}

func newRunHarness(t *testing.T) *runHarness {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	store, err := etcdstore.Open(ctx, etcdstore.OpenConfig{DataDir: t.TempDir(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	sess, err := store.OpenSession(ctx, hastore.SessionConfig{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close(context.Background()) })
	return &runHarness{t: t, ctx: ctx, store: &dirtyStore{Store: store}, sess: sess, runners: map[string]*scriptedRunner{}}
}

// term leads with a new Dispatcher until the returned function resigns.
func (h *runHarness) term() (*dispatcher.Dispatcher, func()) {
	t := h.t
	d, err := dispatcher.New(dispatcher.Config{
		Store: h.store, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), TaskExecutors: &h.tes, ResultRetention: h.retention,
		Jobs: jobsOf(h.store, func(plan *hastorev1.ExecutionPlan, _ bool, _ *hastore.Leadership, onStatus func(*jobplanev1.JobSummary)) (dispatcher.JobRunner, error) {
			r := &scriptedRunner{onStatus: onStatus, end: make(chan jobplanev1.JobStatus, 1)}
			h.mu.Lock()
			h.runners[plan.GetRunId()] = r
			h.mu.Unlock()
			return r, nil
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	l, err := h.sess.Campaign(h.ctx, election.JobManager, "")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.Lead(l.Context(), l) }()
	h.eventually("leading", func() bool { _, err := d.Overview(h.ctx); return err == nil })
	return d, func() {
		if err := l.Resign(h.ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("term: %v", err)
		}
	}
}

func (h *runHarness) eventually(what string, ok func() bool) {
	h.t.Helper()
	for !ok() {
		select {
		case <-h.ctx.Done():
			h.t.Fatalf("%s: not within the deadline", what)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// end ends a run with status and waits for its result.
func (h *runHarness) end(d *dispatcher.Dispatcher, id, run string, status jobplanev1.JobStatus) *jobplanev1.JobResult {
	h.t.Helper()
	h.mu.Lock()
	r := h.runners[run]
	h.mu.Unlock()
	r.end <- status
	res, err := d.Result(h.ctx, id, run, true)
	if err != nil {
		h.t.Fatalf("Result(%s, %s): %v", id, run, err)
	}
	return res
}

var runGraph = &jobplanev1.JobGraph{Vertices: []*jobplanev1.JobVertex{{Id: "v", Invokable: "noop", Parallelism: 1}}}

// Every run of a job id has its own run id, kept with its result; a
// purge frees the id, and a call naming the old run is refused and does
// nothing. A live job is not purged; one whose cleanup is not done
// neither, nor reused.
func TestRunIDsAndPurge(t *testing.T) {
	h := newRunHarness(t)
	d, resign := h.term()
	defer resign()
	ctx := h.ctx

	first, err := d.Submit(ctx, "j", runGraph)
	if err != nil || !first.Created || first.RunID == "" {
		t.Fatalf("Submit = %+v, %v; want created with a run id", first, err)
	}
	if again, err := d.Submit(ctx, "j", runGraph); err != nil || again.Created || again.RunID != first.RunID {
		t.Errorf("resubmission = %+v, %v; want created=false with run id %s", again, err, first.RunID)
	}
	var nt *dispatcher.NotTerminalError
	if err := d.Purge(ctx, "j", ""); !errors.As(err, &nt) {
		t.Errorf("Purge of a live job = %v; want a *NotTerminalError", err)
	}
	res := h.end(d, "j", first.RunID, jobstatus.Finished)
	if res.GetRunId() != first.RunID {
		t.Errorf("result's run id = %q; want %q", res.GetRunId(), first.RunID)
	}
	if again, err := d.Submit(ctx, "j", runGraph); err != nil || again.Created || again.RunID != first.RunID || again.Status != jobstatus.Finished {
		t.Errorf("resubmission of an ended job (REJECT_DUPLICATE) = %+v, %v; want its result, created=false", again, err)
	}

	h.store.dirty.Store(true)
	var pending *dispatcher.CleanupPendingError
	if err := d.Purge(ctx, "j", ""); !errors.As(err, &pending) {
		t.Errorf("Purge while the cleanup is not done = %v; want a *CleanupPendingError", err)
	}
	if _, err := d.SubmitReusing(ctx, "j", runGraph, true); !errors.As(err, &pending) {
		t.Errorf("ALLOW_DUPLICATE submission while the cleanup is not done = %v; want a *CleanupPendingError", err)
	}
	if got, err := d.Result(ctx, "j", "", false); err != nil || !proto.Equal(got, res) {
		t.Errorf("after refused removals, Result = %v, %v; want the kept result", got, err)
	}
	h.store.dirty.Store(false)

	if err := d.Purge(ctx, "j", "another-run"); !errors.Is(err, dispatcher.ErrJobNotFound) {
		t.Errorf("Purge of another run = %v; want ErrJobNotFound", err)
	}
	if err := d.Purge(ctx, "j", first.RunID); err != nil {
		t.Fatalf("Purge: %v", err)
	}
	if _, err := d.Result(ctx, "j", "", false); !errors.Is(err, dispatcher.ErrJobNotFound) {
		t.Errorf("Result after a purge = %v; want ErrJobNotFound", err)
	}
	if _, err := h.store.GetJobResultEntry(ctx, "j"); !errors.Is(err, hastore.ErrResultNotFound) {
		t.Errorf("the store keeps the purged result: %v", err)
	}
	if err := d.Purge(ctx, "j", ""); !errors.Is(err, dispatcher.ErrJobNotFound) {
		t.Errorf("Purge repeated = %v; want ErrJobNotFound", err)
	}

	second, err := d.Submit(ctx, "j", runGraph)
	if err != nil || !second.Created || second.RunID == "" || second.RunID == first.RunID {
		t.Fatalf("Submit after a purge = %+v, %v; want a new run with a new run id (the old: %s)", second, err, first.RunID)
	}
	var norun *dispatcher.RunNotFoundError
	if _, err := d.CancelRun(ctx, "j", dispatcher.CancelRequest{RunID: first.RunID}); !errors.As(err, &norun) {
		t.Errorf("CancelRun of the old run = %v; want a *RunNotFoundError", err)
	}
	if c, err := h.store.Cancellation(ctx, "j"); err != nil || c != nil {
		t.Errorf("after a refused CancelRun, the store's cancel request = %v, %v; want none", c, err)
	}
	if _, _, err := d.Details(ctx, "j", first.RunID, false, jobmaster.Page{}); !errors.As(err, &norun) {
		t.Errorf("Details of the old run = %v; want a *RunNotFoundError", err)
	}
	if det, _, err := d.Details(ctx, "j", second.RunID, false, jobmaster.Page{}); err != nil || det.GetSummary().GetRunId() != second.RunID {
		t.Errorf("Details of the new run = %v, %v; want its run id", det.GetSummary(), err)
	}
	if err := d.Watch(ctx, "j", first.RunID, "", time.Hour, func(dispatcher.WatchEvent) error { return nil }); !errors.As(err, &norun) {
		t.Errorf("Watch of the old run = %v; want a *RunNotFoundError", err)
	}
}

// With ALLOW_DUPLICATE, an ended job's id runs again under a new run id;
// of concurrent such submissions exactly one creates the run.
func TestIDReuseAllowDuplicate(t *testing.T) {
	h := newRunHarness(t)
	d, resign := h.term()
	defer resign()
	ctx := h.ctx

	first, err := d.SubmitReusing(ctx, "j", runGraph, true)
	if err != nil || !first.Created {
		t.Fatalf("Submit = %+v, %v", first, err)
	}
	if again, err := d.SubmitReusing(ctx, "j", runGraph, true); err != nil || again.Created || again.RunID != first.RunID {
		t.Errorf("ALLOW_DUPLICATE resubmission of a live job = %+v, %v; want its run, created=false", again, err)
	}
	h.end(d, "j", first.RunID, jobstatus.Failed)

	// A new run that would be refused for its invokables leaves the old
	// result in place.
	h.tes.refuse.Store(true)
	var notOffered *dispatcher.NotOfferedError
	if _, err := d.SubmitReusing(ctx, "j", runGraph, true); !errors.As(err, &notOffered) {
		t.Errorf("ALLOW_DUPLICATE submission of a job whose invokable is not offered = %v; want a *NotOfferedError", err)
	}
	if res, err := d.Result(ctx, "j", first.RunID, false); err != nil || res.GetStatus() != jobstatus.Failed {
		t.Errorf("after a refused ALLOW_DUPLICATE submission, Result = %v, %v; want the old run's FAILED result kept", res, err)
	}
	h.tes.refuse.Store(false)

	const n = 8
	outs := make([]dispatcher.SubmitOutcome, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { outs[i], errs[i] = d.SubmitReusing(ctx, "j", runGraph, true) })
	}
	wg.Wait()
	created, runs := 0, map[string]bool{}
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("concurrent ALLOW_DUPLICATE submission: %v", errs[i])
		}
		if outs[i].Created {
			created++
		}
		runs[outs[i].RunID] = true
	}
	if created != 1 || len(runs) != 1 || runs[first.RunID] {
		t.Errorf("concurrent ALLOW_DUPLICATE submissions: %d created, run ids %v; want one created, one new run id (not %s)", created, runs, first.RunID)
	}
}

// CancelJob's request id and reason are recorded with the request: the
// first's are kept, shown in the summary and the result, and survive a
// change of leader.
func TestCancelRecord(t *testing.T) {
	h := newRunHarness(t)
	d, resign := h.term()
	ctx := h.ctx
	out, err := d.Submit(ctx, "j", runGraph)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.CancelRun(ctx, "j", dispatcher.CancelRequest{RunID: out.RunID, RequestID: "r1", Reason: "first"}); err != nil {
		t.Fatalf("CancelRun: %v", err)
	}
	if _, err := d.CancelRun(ctx, "j", dispatcher.CancelRequest{RequestID: "r2", Reason: "second"}); err != nil {
		t.Fatalf("CancelRun again: %v", err)
	}
	want := func(what string, c *jobplanev1.Cancellation) {
		t.Helper()
		if c.GetRequestId() != "r1" || c.GetReason() != "first" || c.GetRequestedTime() == nil {
			t.Errorf("%s: cancellation = %v; want the first request's (r1, first, with a time)", what, c)
		}
	}
	det, _, err := d.Details(ctx, "j", "", false, jobmaster.Page{})
	if err != nil {
		t.Fatal(err)
	}
	want("summary", det.GetSummary().GetCancellation())
	stored, err := h.store.Cancellation(ctx, "j")
	if err != nil {
		t.Fatal(err)
	}
	want("store", stored)
	resign()

	d, resign = h.term()
	defer resign()
	det, _, err = d.Details(ctx, "j", out.RunID, false, jobmaster.Page{})
	if err != nil {
		t.Fatal(err)
	}
	want("summary after a change of leader", det.GetSummary().GetCancellation())
	res := h.end(d, "j", out.RunID, jobstatus.Canceled)
	want("result", res.GetCancellation())
	if res.GetRunId() != out.RunID {
		t.Errorf("result's run id = %q; want %q", res.GetRunId(), out.RunID)
	}
}

// CancelJob's request id, reason and run id, and the run id of the other
// calls, are bounded: past a bound the call is INVALID_ARGUMENT with a
// violation per field, before anything is looked up.
func TestRunFieldBounds(t *testing.T) {
	store := newRunHarness(t).store
	d, err := dispatcher.New(dispatcher.Config{Store: store, Jobs: jobsOf(store, nil)})
	if err != nil {
		t.Fatal(err)
	}
	h := dispatcher.NewHandler(d)
	ctx := context.Background()
	long := func(n int) string { return strings.Repeat("x", n) }
	fields := func(err error) []string {
		var out []string
		for _, f := range apierror.Violations(err) {
			out = append(out, f.Path)
		}
		return out
	}
	_, err = h.CancelJob(ctx, &jobplanev1.CancelJobRequest{JobId: "j", RunId: long(129), RequestId: long(129), Reason: long(1025)})
	if got, want := fields(err), []string{"run_id", "request_id", "reason"}; connect.CodeOf(err) != connect.CodeInvalidArgument || !slices.Equal(got, want) {
		t.Errorf("CancelJob over the bounds = %v (violations %v); want INVALID_ARGUMENT naming %v", err, got, want)
	}
	_, err = h.CancelJob(ctx, &jobplanev1.CancelJobRequest{JobId: "j", RunId: long(128), RequestId: long(128), Reason: long(1024)})
	if connect.CodeOf(err) == connect.CodeInvalidArgument {
		t.Errorf("CancelJob at the bounds = %v; want it taken (NOT_LEADER here)", err)
	}
	for name, call := range map[string]func() error{
		"GetJob": func() error {
			_, err := h.GetJob(ctx, &jobplanev1.GetJobRequest{JobId: "j", RunId: long(129)})
			return err
		},
		"GetJobResult": func() error {
			_, err := h.GetJobResult(ctx, &jobplanev1.GetJobResultRequest{JobId: "j", RunId: long(129)})
			return err
		},
		"PurgeJob": func() error {
			_, err := h.PurgeJob(ctx, &jobplanev1.PurgeJobRequest{JobId: "j", RunId: long(129)})
			return err
		},
	} {
		if err := call(); !slices.Equal(fields(err), []string{"run_id"}) {
			t.Errorf("%s with a run id over its bound = %v; want INVALID_ARGUMENT naming run_id", name, err)
		}
	}
}

// Retention that acts on a listing made before the id's result was
// purged and the id ran again deletes nothing of the new run: it deletes
// by job id, so it checks the run first.
func TestRetentionSparesANewerRun(t *testing.T) {
	h := newRunHarness(t)
	h.retention = time.Hour // its own rounds come every minute: the test runs one itself
	d, resign := h.term()
	defer resign()
	ctx := h.ctx
	first, err := d.Submit(ctx, "j", runGraph)
	if err != nil {
		t.Fatal(err)
	}
	old := h.end(d, "j", first.RunID, jobstatus.Finished)
	if err := d.Purge(ctx, "j", ""); err != nil {
		t.Fatal(err)
	}
	second, err := d.Submit(ctx, "j", runGraph)
	if err != nil {
		t.Fatal(err)
	}
	h.end(d, "j", second.RunID, jobstatus.Finished)
	// The old run's result, as listed before its purge, long expired.
	stale := proto.CloneOf(old)
	stale.EndTime = timestamppb.New(time.Unix(0, 0))
	h.store.mu.Lock()
	h.store.stale = &hastorev1.JobResultEntry{Result: stale, State: hastorev1.JobResultState_JOB_RESULT_STATE_CLEAN}
	h.store.mu.Unlock()
	d.ExpireResults(ctx)
	entry, err := h.store.GetJobResultEntry(ctx, "j")
	if err != nil || entry.GetResult().GetRunId() != second.RunID {
		t.Errorf("after retention acted on the old run's listing, the store's result = %v, %v; want the new run's (%s) kept", entry.GetResult(), err, second.RunID)
	}
	if res, err := d.Result(ctx, "j", second.RunID, false); err != nil {
		t.Errorf("after retention acted on the old run's listing, Result of the new run = %v, %v; want it kept", res, err)
	}
}

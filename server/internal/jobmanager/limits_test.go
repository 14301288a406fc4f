package jobmanager_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/internal/clientlimit"
	"github.com/jobplane/jobplane/server/internal/principal"
	"github.com/jobplane/jobplane/server/localcluster"
)

// principalHeader names the caller in these tests, as authentication
// would: asPrincipal puts it in the call's context.
const principalHeader = "X-Test-Principal"

// asPrincipal stands in for the authentication interceptor, which runs
// before the limits: a call with principalHeader is that principal's.
type asPrincipal struct{}

func (asPrincipal) with(ctx context.Context, h interface{ Get(string) string }) context.Context {
	if name := h.Get(principalHeader); name != "" {
		return principal.NewContext(ctx, principal.Principal{Name: name, Method: "test"})
	}
	return ctx
}

func (a asPrincipal) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		return next(a.with(ctx, req.Header()), req)
	}
}

func (asPrincipal) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (a asPrincipal) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		return next(a.with(ctx, conn.RequestHeader()), conn)
	}
}

// as returns ctx for a call as the principal who ("" for none).
func as(ctx context.Context, who string) context.Context {
	if who == "" {
		return ctx
	}
	ctx, call := connect.NewClientContext(ctx)
	call.RequestHeader().Set(principalHeader, who)
	return ctx
}

// waitingJob is a job of one vertex of parallelism p that waits for slots
// (the clusters of these tests have no TaskExecutors) until canceled.
func waitingJob(p int32) *jobplanev1.JobGraph {
	return &jobplanev1.JobGraph{Name: "waiting", Vertices: []*jobplanev1.JobVertex{
		{Id: "v", Invokable: "sleep", Parallelism: p, Config: map[string]string{"duration": "1h"}},
	}}
}

// until polls cond every few milliseconds until it holds, failing the
// test after 20s.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("after 20s: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// wantRefused checks that err is RESOURCE_EXHAUSTED with reason, and
// returns its metadata.
func wantRefused(t *testing.T, what string, err error, reason jobplanev1.ErrorReason) map[string]string {
	t.Helper()
	got, md, _ := apierror.Info(err)
	if connect.CodeOf(err) != connect.CodeResourceExhausted || got != reason {
		t.Fatalf("%s: err = %v (reason %v), want RESOURCE_EXHAUSTED %v", what, err, got, reason)
	}
	return md
}

// wantNoPlan checks that a refused job left nothing in the store.
func wantNoPlan(t *testing.T, c *localcluster.Cluster, id string) {
	t.Helper()
	if _, err := c.Store().GetExecutionPlan(context.Background(), id); !errors.Is(err, hastore.ErrPlanNotFound) {
		t.Errorf("plan of the refused job %s: err = %v, want none", id, err)
	}
}

func TestStreamsPerClient(t *testing.T) {
	lim, err := clientlimit.New(clientlimit.Config{MaxStreams: 2})
	if err != nil {
		t.Fatal(err)
	}
	c := newCluster(t, localcluster.Config{TaskExecutors: -1, DispatcherOptions: []connect.HandlerOption{connect.WithInterceptors(asPrincipal{}, lim)}})
	submit(t, c, "watched", waitingJob(1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// watch opens a WatchJob stream as who ("" for the network address
	// alone) and returns it once it delivered the job's first event, or
	// with the error that ended it.
	watch := func(who string) (*connect.ServerStreamForClient[jobplanev1.WatchJobResponse], error) {
		s, err := c.Dispatcher().WatchJob(as(ctx, who), &jobplanev1.WatchJobRequest{JobId: "watched"})
		if err != nil {
			return nil, err
		}
		if !s.Receive() {
			err := s.Err()
			s.Close()
			if err == nil {
				err = errors.New("the stream ended without an event")
			}
			return nil, err
		}
		return s, nil
	}
	const addr = "address 127.0.0.1"
	s1, err := watch("")
	if err != nil {
		t.Fatal(err)
	}
	s2, err := watch("")
	if err != nil {
		t.Fatal(err)
	}
	_, err = watch("")
	md := wantRefused(t, "a third stream", err, jobplanev1.ErrorReason_ERROR_REASON_TOO_MANY_STREAMS)
	if md["limit"] != "2" {
		t.Errorf("metadata = %v, want limit 2", md)
	}
	if n := lim.Streams(addr); n != 2 {
		t.Errorf("streams counted for %s = %d, want 2 (the refused one not counted)", addr, n)
	}
	// Another client (a principal, from the same address) has a limit of
	// its own.
	a1, err := watch("alice")
	if err != nil {
		t.Fatalf("alice's stream: %v", err)
	}
	if n := lim.Streams("principal alice"); n != 1 {
		t.Errorf("streams counted for alice = %d, want 1", n)
	}

	// A stream that ends makes room.
	s1.Close()
	until(t, "the closed stream is still counted", func() bool { return lim.Streams(addr) == 1 })
	s3, err := watch("")
	if err != nil {
		t.Fatalf("a stream after one closed: %v", err)
	}
	_, err = watch("")
	wantRefused(t, "a stream over the limit again", err, jobplanev1.ErrorReason_ERROR_REASON_TOO_MANY_STREAMS)
	// A stream the server ends (its job ended) makes room too.
	if _, err := c.Dispatcher().CancelJob(ctx, &jobplanev1.CancelJobRequest{JobId: "watched"}); err != nil {
		t.Fatal(err)
	}
	for s2.Receive() {
	}
	for s3.Receive() {
	}
	for a1.Receive() {
	}
	until(t, "streams ended by the server are still counted", func() bool {
		return lim.Streams(addr) == 0 && lim.Streams("principal alice") == 0
	})
	s2.Close()
	s3.Close()
	a1.Close()
}

// clock is a clock the test sets.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func TestSubmitRatePerClient(t *testing.T) {
	clk := &clock{now: time.Unix(1_000_000, 0)}
	lim, err := clientlimit.New(clientlimit.Config{SubmitRate: 1, SubmitBurst: 2, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	c := newCluster(t, localcluster.Config{TaskExecutors: -1, DispatcherOptions: []connect.HandlerOption{connect.WithInterceptors(asPrincipal{}, lim)}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	submitAs := func(who, id string) (*jobplanev1.SubmitJobResponse, error) {
		return c.Dispatcher().SubmitJob(as(ctx, who), &jobplanev1.SubmitJobRequest{JobId: id, JobGraph: waitingJob(1)})
	}
	refusedFor := func(what string, err error, want time.Duration) {
		t.Helper()
		md := wantRefused(t, what, err, jobplanev1.ErrorReason_ERROR_REASON_SUBMIT_RATE_EXCEEDED)
		if md["rate"] != "1" || md["burst"] != "2" {
			t.Errorf("%s: metadata = %v, want rate 1 and burst 2", what, md)
		}
		if d, ok := apierror.RetryDelay(err); !ok || d != want {
			t.Errorf("%s: RetryInfo delay = %v (%v), want %v", what, d, ok, want)
		}
	}

	// The burst: two at once.
	for _, id := range []string{"r1", "r2"} {
		if _, err := submitAs("", id); err != nil {
			t.Fatalf("submission %s within the burst: %v", id, err)
		}
	}
	_, err = submitAs("", "r3")
	refusedFor("a third submission at once", err, time.Second)
	wantNoPlan(t, c, "r3")
	// A resubmission counts as a submission.
	_, err = submitAs("", "r1")
	refusedFor("a resubmission over the rate", err, time.Second)
	// Another client has a bucket of its own.
	if _, err := submitAs("bob", "b1"); err != nil {
		t.Fatalf("bob's submission: %v", err)
	}
	if n := lim.Buckets(); n != 2 {
		t.Errorf("buckets = %d, want 2 (the address and bob)", n)
	}

	// Time refills the bucket, one submission a second.
	clk.Advance(600 * time.Millisecond)
	_, err = submitAs("", "r3")
	refusedFor("a submission before the delay passed", err, 400*time.Millisecond)
	clk.Advance(400 * time.Millisecond)
	if resp, err := submitAs("", "r3"); err != nil || !resp.GetCreated() {
		t.Fatalf("the submission after the delay: %v, %v; want created", resp, err)
	}
	_, err = submitAs("", "r4")
	refusedFor("the next one at once", err, time.Second)

	// A bucket that filled up again is dropped: the state kept stays
	// with the clients that submitted lately.
	clk.Advance(10 * time.Second)
	if _, err := submitAs("carol", "c1"); err != nil {
		t.Fatalf("carol's submission: %v", err)
	}
	if n := lim.Buckets(); n != 1 {
		t.Errorf("buckets after the others filled up = %d, want 1 (carol's)", n)
	}
	// A dropped bucket comes back full: the address gets its burst.
	for _, id := range []string{"r4", "r5"} {
		if _, err := submitAs("", id); err != nil {
			t.Fatalf("submission %s after the bucket was dropped: %v", id, err)
		}
	}
}

func TestClusterLimits(t *testing.T) {
	c := newCluster(t, localcluster.Config{TaskExecutors: -1, JobManagers: 2, MaxJobs: 2, MaxClusterSubtasks: 5})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	try := func(d jobplanev1connect.DispatcherServiceClient, id string, p int32) (*jobplanev1.SubmitJobResponse, error) {
		return d.SubmitJob(ctx, &jobplanev1.SubmitJobRequest{JobId: id, JobGraph: waitingJob(p)})
	}
	end := func(d jobplanev1connect.DispatcherServiceClient, id string) {
		t.Helper()
		if _, err := d.CancelJob(ctx, &jobplanev1.CancelJobRequest{JobId: id}); err != nil {
			t.Fatalf("cancel %s: %v", id, err)
		}
		res, err := d.GetJobResult(ctx, &jobplanev1.GetJobResultRequest{JobId: id, Wait: true})
		if err != nil || res.GetResult().GetStatus() != jobplanev1.JobStatus_JOB_STATUS_CANCELED {
			t.Fatalf("result of %s: %v, %v", id, res, err)
		}
	}
	wantSubtasksRefused := func(err error, id string, job, live int) {
		t.Helper()
		md := wantRefused(t, "job "+id, err, jobplanev1.ErrorReason_ERROR_REASON_TOO_MANY_SUBTASKS)
		if md["job_id"] != id || md["limit"] != "5" || md["job_subtasks"] != strconv.Itoa(job) || md["live_subtasks"] != strconv.Itoa(live) {
			t.Errorf("job %s: metadata = %v, want job_id %s, limit 5, job_subtasks %d, live_subtasks %d", id, md, id, job, live)
		}
		wantNoPlan(t, c, id)
	}
	wantJobsRefused := func(err error, id string) {
		t.Helper()
		md := wantRefused(t, "job "+id, err, jobplanev1.ErrorReason_ERROR_REASON_TOO_MANY_JOBS)
		if md["job_id"] != id || md["limit"] != "2" {
			t.Errorf("job %s: metadata = %v, want job_id %s, limit 2", id, md, id)
		}
		wantNoPlan(t, c, id)
	}

	leader := c.Dispatcher()
	submit(t, c, "a", waitingJob(2))
	_, err := try(leader, "big", 4)
	wantSubtasksRefused(err, "big", 4, 2)
	submit(t, c, "b", waitingJob(3))
	_, err = try(leader, "c", 1)
	wantJobsRefused(err, "c")
	// A resubmission of a live job is answered as always.
	if resp, err := try(leader, "a", 2); err != nil || resp.GetCreated() {
		t.Fatalf("resubmission of a live job at the limit: %v, %v; want OK, not created", resp, err)
	}
	// A job that ends makes room.
	end(leader, "a")
	if resp, err := try(leader, "c", 1); err != nil || !resp.GetCreated() {
		t.Fatalf("a job after one ended: %v, %v; want created", resp, err)
	}
	// An ended job resubmitted is answered with its end, at the limit.
	if resp, err := try(leader, "a", 2); err != nil || resp.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_CANCELED {
		t.Fatalf("resubmission of an ended job at the limit: %v, %v; want CANCELED", resp, err)
	}

	// The standby takes over: it counts the jobs it recovers (b and c:
	// two jobs, four subtasks).
	c.JobManagers()[0].Stop()
	standby := c.JobManagers()[1].Dispatcher()
	until(t, "the standby does not lead", func() bool {
		_, err = try(standby, "d", 1)
		return !apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_NOT_LEADER)
	})
	wantJobsRefused(err, "d")
	end(standby, "c")
	_, err = try(standby, "e", 3)
	wantSubtasksRefused(err, "e", 3, 3)
	if resp, err := try(standby, "d", 2); err != nil || !resp.GetCreated() {
		t.Fatalf("a job within the limits after the takeover: %v, %v; want created", resp, err)
	}
}

// Concurrent submissions cannot together take the cluster over its
// limit: each new job counts from when its submission takes its id.
func TestClusterLimitConcurrentSubmissions(t *testing.T) {
	c := newCluster(t, localcluster.Config{TaskExecutors: -1, MaxJobs: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const n = 12
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, errs[i] = c.Dispatcher().SubmitJob(ctx, &jobplanev1.SubmitJobRequest{JobId: "j" + strconv.Itoa(i), JobGraph: waitingJob(1)})
		})
	}
	wg.Wait()
	accepted := 0
	for i, err := range errs {
		switch {
		case err == nil:
			accepted++
		case !apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_TOO_MANY_JOBS):
			t.Errorf("j%d: %v, want OK or TOO_MANY_JOBS", i, err)
		}
	}
	ids, err := c.Store().ListExecutionPlans(ctx, "", 0)
	if accepted != 3 || err != nil || len(ids) != 3 {
		t.Errorf("accepted %d, plans %v (%v); want 3 of each", accepted, ids, err)
	}
}

// A submission that fails leaves no count behind: its job id and its room
// are free again.
func TestClusterLimitFailedSubmission(t *testing.T) {
	var rec *localcluster.StoreRecorder
	c := newCluster(t, localcluster.Config{TaskExecutors: -1, MaxJobs: 1, WrapStore: func(s hastore.Store) hastore.Store {
		rec = localcluster.NewStoreRecorder(s)
		return rec
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rec.FailNext("put-plan", 1)
	_, err := c.Dispatcher().SubmitJob(ctx, &jobplanev1.SubmitJobRequest{JobId: "lost", JobGraph: waitingJob(1)})
	if !apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_PERSIST_FAILED) {
		t.Fatalf("a submission whose persist failed: %v, want PERSIST_FAILED", err)
	}
	if resp, err := c.Dispatcher().SubmitJob(ctx, &jobplanev1.SubmitJobRequest{JobId: "next", JobGraph: waitingJob(1)}); err != nil || !resp.GetCreated() {
		t.Fatalf("the next submission: %v, %v; want created", resp, err)
	}
	_, err = c.Dispatcher().SubmitJob(ctx, &jobplanev1.SubmitJobRequest{JobId: "over", JobGraph: waitingJob(1)})
	wantRefused(t, "a job over the limit", err, jobplanev1.ErrorReason_ERROR_REASON_TOO_MANY_JOBS)
}

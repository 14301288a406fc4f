package jobmanager_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	"github.com/jobplane/jobplane/gen/jobplane/cluster/v1/clusterv1connect"
	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/sdk/taskexecutor"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/localcluster"
)

// runs counts the runs of every subtask of the "count" invokable, and
// when each started relative to the recorder's events.
type runs struct {
	mu    sync.Mutex
	count map[string]int
	rec   *localcluster.StoreRecorder
	first map[string]int // job -> number of store events when its first task ran
}

func newRuns() *runs { return &runs{count: map[string]int{}, first: map[string]int{}} }

func (r *runs) invokable(ctx context.Context, t taskexecutor.Task) error {
	r.mu.Lock()
	r.count[fmt.Sprintf("%s/%s/%d", t.JobID, t.VertexID, t.SubtaskIndex)]++
	if _, ok := r.first[t.JobID]; !ok && r.rec != nil {
		r.first[t.JobID] = len(r.rec.Events())
	}
	r.mu.Unlock()
	return nil
}

func (r *runs) of(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.count[key]
}

func countJob() *jobplanev1.JobGraph {
	return &jobplanev1.JobGraph{Name: "count", Vertices: []*jobplanev1.JobVertex{{Id: "v", Invokable: "count", Parallelism: 3}}}
}

func startRecorded(t *testing.T) (*localcluster.Cluster, *localcluster.StoreRecorder, *runs) {
	r := newRuns()
	var rec *localcluster.StoreRecorder
	c := newCluster(t, localcluster.Config{
		Invokables: map[string]taskexecutor.Invokable{"count": r.invokable},
		WrapStore: func(s hastore.Store) hastore.Store {
			rec = localcluster.NewStoreRecorder(s)
			return rec
		},
	})
	r.rec = rec
	return c, rec, r
}

func TestConcurrentIdenticalSubmissions(t *testing.T) {
	c, rec, r := startRecorded(t)
	const n = 16
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		created int
		errs    []error
	)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			resp, err := c.Dispatcher().SubmitJob(ctx, &jobplanev1.SubmitJobRequest{JobId: "same", JobGraph: countJob()})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			} else if resp.GetCreated() {
				created++
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		t.Errorf("SubmitJob: %v", err)
	}
	if created != 1 {
		t.Errorf("%d submissions created the job, want 1", created)
	}
	if res := result(t, c, "same"); res.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("result = %v", res)
	}
	if got := rec.Count("put-plan", "same"); got != 1 {
		t.Errorf("%d plan puts, want 1", got)
	}
	if got := rec.Count("granted", election.Job("same")); got != 1 {
		t.Errorf("%d job grants (runners, JobMasters), want 1", got)
	}
	for i := range 3 {
		if got := r.of(fmt.Sprintf("same/v/%d", i)); got != 1 {
			t.Errorf("subtask %d ran %d times, want 1", i, got)
		}
	}
}

func TestPersistBeforeRun(t *testing.T) {
	c, rec, r := startRecorded(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// A failed persist: an error, and nothing happens for the job.
	rec.FailNext("put-plan", 1)
	_, err := c.Dispatcher().SubmitJob(ctx, &jobplanev1.SubmitJobRequest{JobId: "p", JobGraph: countJob()})
	if connect.CodeOf(err) != connect.CodeUnavailable || !apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_PERSIST_FAILED) {
		t.Fatalf("submit with a failing put: err = %v, want UNAVAILABLE PERSIST_FAILED", err)
	}
	if got := rec.Count("campaign", election.Job("p")); got != 0 {
		t.Errorf("a job whose persist failed campaigned %d times", got)
	}
	if _, err := c.Store().GetExecutionPlan(ctx, "p"); err == nil {
		t.Error("a plan whose persist failed is in the store")
	}
	if _, err := c.Dispatcher().GetJob(ctx, &jobplanev1.GetJobRequest{JobId: "p"}); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("GetJob after a failed submit: %v, want NOT_FOUND", err)
	}

	// The same submission again: persisted first, then run exactly once.
	resp, err := c.Dispatcher().SubmitJob(ctx, &jobplanev1.SubmitJobRequest{JobId: "p", JobGraph: countJob()})
	if err != nil || !resp.GetCreated() {
		t.Fatalf("retry: %v, %v", resp, err)
	}
	atAck := rec.Events()
	if !slices.ContainsFunc(atAck, func(e localcluster.StoreCall) bool { return e.Op == "put-plan" && e.Key == "p" && e.Err == nil }) {
		t.Error("the submission was acknowledged before its plan was put")
	}
	if res := result(t, c, "p"); res.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("result = %v", res)
	}
	events := rec.Events()
	put := slices.IndexFunc(events, func(e localcluster.StoreCall) bool { return e.Op == "put-plan" && e.Key == "p" && e.Err == nil })
	campaign := slices.IndexFunc(events, func(e localcluster.StoreCall) bool { return e.Op == "campaign" && e.Key == election.Job("p") })
	if put < 0 || campaign < 0 || put > campaign {
		t.Errorf("plan put at event %d, job campaign at %d: the put must come first", put, campaign)
	}
	r.mu.Lock()
	firstRun := r.first["p"]
	r.mu.Unlock()
	if firstRun <= put {
		t.Errorf("a task ran with %d store events recorded, before the plan put (event %d)", firstRun, put)
	}
	for i := range 3 {
		if got := r.of(fmt.Sprintf("p/v/%d", i)); got != 1 {
			t.Errorf("subtask %d ran %d times, want 1", i, got)
		}
	}
}

func TestResultDirtyThenCleanupThenClean(t *testing.T) {
	c, rec, _ := startRecorded(t)
	rec.FailNext("mark-clean", 2)
	submit(t, c, "r", countJob())
	if res := result(t, c, "r"); res.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("result = %v", res)
	}
	deadline := time.Now().Add(30 * time.Second)
	for rec.Count("mark-clean", "r") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("result not marked clean after 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if e, err := c.Store().GetJobResultEntry(context.Background(), "r"); err != nil || e.GetState() != hastorev1.JobResultState_JOB_RESULT_STATE_CLEAN {
		t.Errorf("entry = %v, %v; want clean", e, err)
	}
	var order []string
	for _, e := range rec.Events() {
		if e.Key == "r" && (e.Op == "create-dirty" || e.Op == "delete-plan" || e.Op == "mark-clean") {
			ok := "ok"
			if e.Err != nil {
				ok = "failed"
			}
			order = append(order, e.Op+":"+ok)
		}
	}
	want := []string{"create-dirty:ok", "delete-plan:ok", "mark-clean:failed", "mark-clean:failed", "mark-clean:ok"}
	if !slices.Equal(order, want) {
		t.Errorf("result writes = %v, want %v", order, want)
	}
}

func TestJobLeadershipFlapping(t *testing.T) {
	c := newCluster(t, localcluster.Config{})
	submit(t, c, "flap", twoVertices("sleep", map[string]string{"duration": "1h"}))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	name := election.Job("flap")
	jmClient := clusterv1connect.NewJobMasterServiceClient(c.HTTPClient(), c.URL())
	// leaderWithJobMaster waits until the job's leader has a JobMaster
	// running under its token: one that answers a call with that token
	// (refusing the unknown attempt it names) instead of NOT_LEADER.
	leaderWithJobMaster := func(after uint64) election.Token {
		t.Helper()
		for {
			info, err := c.Store().Leader(ctx, name)
			if err == nil && info.Token.Epoch > after {
				_, err := jmClient.UpdateTaskExecutionStates(ctx, &clusterv1.UpdateTaskExecutionStatesRequest{
					JobId: "flap", JobMasterToken: &jobplanev1.FencingToken{SessionId: info.Token.SessionID, Epoch: info.Token.Epoch}, TaskExecutorId: "probe",
					Statuses: []*jobplanev1.TaskExecutionStatus{{Attempt: &jobplanev1.ExecutionAttemptId{VertexId: "nope"}, State: jobplanev1.ExecutionState_EXECUTION_STATE_FAILED}},
				})
				if err == nil {
					return info.Token
				}
			}
			if ctx.Err() != nil {
				t.Fatalf("no JobMaster under a grant newer than %d", after)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	tokens := []election.Token{leaderWithJobMaster(0)}
	for range 10 {
		old := tokens[len(tokens)-1]
		if err := c.Store().Resign(ctx, hastore.Fence{Election: name, Token: old}); err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, leaderWithJobMaster(old.Epoch))
		// The old JobMaster's token is refused from now on.
		_, err := jmClient.UpdateTaskExecutionState(ctx, &clusterv1.UpdateTaskExecutionStateRequest{
			JobId: "flap", JobMasterToken: &jobplanev1.FencingToken{SessionId: old.SessionID, Epoch: old.Epoch}, TaskExecutorId: "x",
			Status: &jobplanev1.TaskExecutionStatus{Attempt: &jobplanev1.ExecutionAttemptId{VertexId: "sink"}, State: jobplanev1.ExecutionState_EXECUTION_STATE_FINISHED},
		})
		if !apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_STALE_FENCING_TOKEN) {
			t.Errorf("UpdateTaskExecutionState with token %v: err = %v, want STALE_FENCING_TOKEN", old, err)
		}
		_, err = jmClient.UpdateTaskExecutionStates(ctx, &clusterv1.UpdateTaskExecutionStatesRequest{
			JobId: "flap", JobMasterToken: &jobplanev1.FencingToken{SessionId: old.SessionID, Epoch: old.Epoch}, TaskExecutorId: "x",
			Statuses: []*jobplanev1.TaskExecutionStatus{{Attempt: &jobplanev1.ExecutionAttemptId{VertexId: "sink"}, State: jobplanev1.ExecutionState_EXECUTION_STATE_FINISHED}},
		})
		if !apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_STALE_FENCING_TOKEN) {
			t.Errorf("UpdateTaskExecutionStates with token %v: err = %v, want STALE_FENCING_TOKEN", old, err)
		}
	}
	// Under the current token, changes of attempts the JobMaster does not
	// know (from a TaskExecutor it did not deploy them to) are refused one
	// by one.
	newest := tokens[len(tokens)-1]
	resp, err := jmClient.UpdateTaskExecutionStates(ctx, &clusterv1.UpdateTaskExecutionStatesRequest{
		JobId: "flap", JobMasterToken: &jobplanev1.FencingToken{SessionId: newest.SessionID, Epoch: newest.Epoch}, TaskExecutorId: "x",
		Statuses: []*jobplanev1.TaskExecutionStatus{
			{Attempt: &jobplanev1.ExecutionAttemptId{VertexId: "nope"}, State: jobplanev1.ExecutionState_EXECUTION_STATE_FAILED},
			{Attempt: &jobplanev1.ExecutionAttemptId{VertexId: "sink"}, State: jobplanev1.ExecutionState_EXECUTION_STATE_FAILED},
		},
	})
	if err != nil || len(resp.GetRefused()) != 2 || resp.GetRefused()[1].GetIndex() != 1 ||
		resp.GetRefused()[1].GetReason() != jobplanev1.ErrorReason_ERROR_REASON_EXECUTION_NOT_FOUND {
		t.Errorf("UpdateTaskExecutionStates of unknown attempts = %v, %v; want both refused EXECUTION_NOT_FOUND", resp, err)
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i].Epoch <= tokens[i-1].Epoch {
			t.Errorf("grant %d has epoch %d after %d", i, tokens[i].Epoch, tokens[i-1].Epoch)
		}
	}
	// The job still runs under its newest JobMaster and can be canceled.
	if _, err := c.Dispatcher().CancelJob(ctx, &jobplanev1.CancelJobRequest{JobId: "flap"}); err != nil {
		t.Fatal(err)
	}
	if res := result(t, c, "flap"); res.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_CANCELED {
		t.Errorf("result = %v, want CANCELED", res)
	}
}

// A plan put whose answer is lost although it was applied still runs the
// job, once: the Dispatcher reads the plan back before it answers.
func TestLostPutAnswer(t *testing.T) {
	c, rec, r := startRecorded(t)
	rec.FailAfterNext("put-plan", 1)
	resp := submit(t, c, "lost", countJob())
	if !resp.GetCreated() {
		t.Errorf("SubmitJob = %v, want created", resp)
	}
	if res := result(t, c, "lost"); res.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("result = %v", res)
	}
	for i := range 3 {
		if got := r.of(fmt.Sprintf("lost/v/%d", i)); got != 1 {
			t.Errorf("subtask %d ran %d times, want 1", i, got)
		}
	}
}

// A plan put whose answer is lost, and whose plan cannot be read back,
// leaves the outcome unknown: the client is told so. The plan is in the
// store (which replaces no plan and deletes none without a result): the
// Dispatcher finds it there and runs the job, once, whether or not the
// client retries; a retry finds the job.
func TestLostPutAnswerUnread(t *testing.T) {
	c, rec, r := startRecorded(t)
	rec.FailAfterNext("put-plan", 1)
	rec.FailNext("get-plan", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := c.Dispatcher().SubmitJob(ctx, &jobplanev1.SubmitJobRequest{JobId: "unread", JobGraph: countJob()})
	if connect.CodeOf(err) != connect.CodeUnavailable || !apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_PERSIST_OUTCOME_UNKNOWN) {
		t.Fatalf("SubmitJob with the outcome unknown: err = %v, want UNAVAILABLE (PERSIST_OUTCOME_UNKNOWN)", err)
	}
	stored, err := c.Store().GetExecutionPlan(ctx, "unread")
	if err != nil {
		t.Fatalf("the first attempt's plan: %v", err)
	}
	waitJob(t, c, "unread", func(*jobplanev1.JobDetails) bool { return true }) // found by the Dispatcher
	res := result(t, c, "unread")
	if res.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED || !res.GetSubmitTime().AsTime().Equal(stored.GetSubmitTime().AsTime()) {
		t.Errorf("result = %v, want FINISHED, submitted at %v (the stored plan's)", res, stored.GetSubmitTime().AsTime())
	}
	if resp := submit(t, c, "unread", countJob()); resp.GetCreated() || resp.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Errorf("retried SubmitJob = %v, want the job, FINISHED, created=false", resp)
	}
	for i := range 3 {
		if got := r.of(fmt.Sprintf("unread/v/%d", i)); got != 1 {
			t.Errorf("subtask %d ran %d times, want 1", i, got)
		}
	}
}

// A retry that comes before the Dispatcher found the plan runs the job
// from it, once.
func TestLostPutAnswerUnreadRetried(t *testing.T) {
	c, rec, r := startRecorded(t)
	rec.FailAfterNext("put-plan", 1)
	rec.FailNext("get-plan", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Dispatcher().SubmitJob(ctx, &jobplanev1.SubmitJobRequest{JobId: "retried", JobGraph: countJob()}); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("SubmitJob with the outcome unknown: err = %v, want UNAVAILABLE", err)
	}
	submit(t, c, "retried", countJob()) // created or not, depending on who found the plan first
	if res := result(t, c, "retried"); res.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Errorf("result = %v, want FINISHED", res)
	}
	for i := range 3 {
		if got := r.of(fmt.Sprintf("retried/v/%d", i)); got != 1 {
			t.Errorf("subtask %d ran %d times, want 1", i, got)
		}
	}
}

// A cancellation is recorded in the store before anything is done for it:
// one the store does not confirm is UNAVAILABLE and leaves the job
// running; the retry cancels it.
func TestCancelRecordedFirst(t *testing.T) {
	c, rec, _ := startRecorded(t)
	submit(t, c, "c", &jobplanev1.JobGraph{Vertices: []*jobplanev1.JobVertex{{Id: "v", Invokable: "sleep", Parallelism: 1, Config: map[string]string{"duration": "1h"}}}})
	waitJob(t, c, "c", func(d *jobplanev1.JobDetails) bool {
		return d.GetSummary().GetStatus() == jobplanev1.JobStatus_JOB_STATUS_RUNNING
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rec.FailNext("request-cancel", 1)
	if _, err := c.Dispatcher().CancelJob(ctx, &jobplanev1.CancelJobRequest{JobId: "c"}); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("CancelJob with the request unrecorded: err = %v, want UNAVAILABLE", err)
	}
	if resp, err := c.Dispatcher().GetJob(ctx, &jobplanev1.GetJobRequest{JobId: "c"}); err != nil || resp.GetJob().GetSummary().GetStatus() != jobplanev1.JobStatus_JOB_STATUS_RUNNING {
		t.Errorf("job after an unrecorded cancel = %v, %v; want it RUNNING: nothing done", resp.GetJob().GetSummary(), err)
	}
	resp, err := c.Dispatcher().CancelJob(ctx, &jobplanev1.CancelJobRequest{JobId: "c"})
	if err != nil {
		t.Fatalf("CancelJob again: %v", err)
	}
	if rec.Count("request-cancel", "c") != 1 {
		t.Errorf("%d recorded cancel requests, want 1 before the answer %v", rec.Count("request-cancel", "c"), resp.GetStatus())
	}
	if res := result(t, c, "c"); res.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_CANCELED {
		t.Errorf("result = %v, want CANCELED", res)
	}
}

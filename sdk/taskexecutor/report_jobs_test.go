package taskexecutor_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	"github.com/jobplane/jobplane/gen/jobplane/cluster/v1/clusterv1connect"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/taskexecutor"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
)

// jobsJobMaster is a JobMaster process that takes the state reports of
// several jobs in one call (UpdateTaskExecutionStatesOfJobs) and nothing
// per job. It holds its first report call until hold is closed, and
// refuses the entries of job "old" as from a stale token.
type jobsJobMaster struct {
	offerTaker
	hold chan struct{}

	mu     sync.Mutex
	calls  [][]string                             // the job of each entry, per call
	states map[string][]jobplanev1.ExecutionState // the changes taken, by job
}

// offerTaker is a JobMaster process that takes every offer, naming
// interval as its heartbeat interval, and lacks every other call.
type offerTaker struct {
	clusterv1connect.UnimplementedJobMasterServiceHandler
	interval time.Duration
}

func (o offerTaker) OfferSlots(_ context.Context, req *clusterv1.OfferSlotsRequest) (*clusterv1.OfferSlotsResponse, error) {
	return &clusterv1.OfferSlotsResponse{Accepted: req.GetOffers(), HeartbeatTimeout: durationpb.New(time.Minute), HeartbeatInterval: durationpb.New(o.interval)}, nil
}

func (j *jobsJobMaster) UpdateTaskExecutionStatesOfJobs(ctx context.Context, req *clusterv1.UpdateTaskExecutionStatesOfJobsRequest) (*clusterv1.UpdateTaskExecutionStatesOfJobsResponse, error) {
	var jobs []string
	for _, e := range req.GetJobs() {
		jobs = append(jobs, e.GetJobId())
	}
	j.mu.Lock()
	first := len(j.calls) == 0
	j.calls = append(j.calls, jobs)
	j.mu.Unlock()
	if first {
		select {
		case <-j.hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	resp := &clusterv1.UpdateTaskExecutionStatesOfJobsResponse{}
	for i, e := range req.GetJobs() {
		resp.Results = append(resp.Results, &clusterv1.UpdateTaskExecutionStatesResponse{})
		if e.GetJobId() == "old" {
			resp.Refused = append(resp.Refused, apierror.Item(i, apierror.StaleToken("job/old", "s", 9)))
			continue
		}
		for _, st := range e.GetStatuses() {
			j.states[e.GetJobId()] = append(j.states[e.GetJobId()], st.GetState())
		}
	}
	return resp, nil
}

func (j *jobsJobMaster) snapshot() (calls [][]string, states map[string][]jobplanev1.ExecutionState) {
	j.mu.Lock()
	defer j.mu.Unlock()
	states = make(map[string][]jobplanev1.ExecutionState, len(j.states))
	for k, v := range j.states {
		states[k] = slices.Clone(v)
	}
	return slices.Clone(j.calls), states
}

// State changes of several jobs made while a report to their JobMasters'
// process is on its way go there together, in one call, each job's under
// its own token; an entry refused as a whole (a stale token) stops that
// job's attempt and no other.
func TestReportsOfSeveralJobsGoInOneCall(t *testing.T) {
	jm := &jobsJobMaster{offerTaker: offerTaker{interval: time.Second}, hold: make(chan struct{}), states: map[string][]jobplanev1.ExecutionState{}}
	url := serveJobMaster(t, jm)
	stopped := make(chan struct{})
	te := startRunning(t, 4, map[string]taskexecutor.Invokable{
		"block": func(ctx context.Context, _ taskexecutor.Task) error {
			<-ctx.Done()
			close(stopped)
			return ctx.Err()
		},
	})
	ctx := context.Background()
	jobs := []string{"a", "b", "c", "old"}
	var requests []*clusterv1.SlotRequest
	for i, job := range jobs {
		requests = append(requests, &clusterv1.SlotRequest{
			SlotIndex: int32(i), AllocationId: job + "-slot", JobId: job, JobMasterAddress: url, JobMasterToken: token(1),
		})
	}
	if _, err := te.RequestSlots(ctx, &clusterv1.RequestSlotsRequest{ResourceManagerToken: token(1), Slots: requests}); err != nil {
		t.Fatal(err)
	}
	deploy := func(job, invokable string) {
		t.Helper()
		for {
			resp, err := te.SubmitTasks(ctx, &clusterv1.SubmitTasksRequest{JobId: job, JobMasterToken: token(1), HeartbeatTimeout: jmTimeout, Tasks: []*clusterv1.TaskDeployment{
				{AllocationId: job + "-slot", Attempt: &jobplanev1.ExecutionAttemptId{VertexId: "v"}, Invokable: invokable},
			}})
			if err != nil {
				t.Fatalf("SubmitTasks of %s: %v", job, err)
			}
			if len(resp.GetRefused()) == 0 {
				return
			}
			// The slot's offer may not be answered yet.
			if !apierror.Is(apierror.FromItem(resp.GetRefused()[0]), jobplanev1.ErrorReason_ERROR_REASON_SLOT_NOT_ALLOCATED) {
				t.Fatalf("SubmitTasks of %s refused: %v", job, resp.GetRefused())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	// Job a's first report is held; what the other jobs report meanwhile
	// waits for it.
	deploy("a", "noop")
	waitFor(t, "the first report call", func() bool {
		calls, _ := jm.snapshot()
		return len(calls) == 1
	})
	deploy("b", "noop")
	deploy("c", "noop")
	deploy("old", "block")
	close(jm.hold)

	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("the attempt whose report was refused as stale is still running")
	}
	want := []jobplanev1.ExecutionState{jobplanev1.ExecutionState_EXECUTION_STATE_RUNNING, jobplanev1.ExecutionState_EXECUTION_STATE_FINISHED}
	waitFor(t, "RUNNING and FINISHED of jobs a, b and c", func() bool {
		_, states := jm.snapshot()
		return slices.Equal(states["a"], want) && slices.Equal(states["b"], want) && slices.Equal(states["c"], want)
	})
	calls, states := jm.snapshot()
	if len(states["old"]) != 0 {
		t.Errorf("job old's changes were taken: %v", states["old"])
	}
	// The second call carries what b, c and old reported while the first
	// was held, and a's FINISHED if it came by then.
	if len(calls) < 2 {
		t.Fatalf("report calls %v, want at least two", calls)
	}
	second := calls[1]
	for _, job := range []string{"b", "c", "old"} {
		if !slices.Contains(second, job) {
			t.Errorf("the second report call carried jobs %v, want b, c and old among them (all calls: %v)", second, calls)
		}
	}
	// Every job's changes are in at most two calls besides the held one:
	// the batch, and the stopped attempt's CANCELED.
	if len(calls) > 4 {
		t.Errorf("%d report calls (%v) for four jobs reporting meanwhile, want them together", len(calls), calls)
	}
}

// failingReportsJobMaster takes offers, fails every
// UpdateTaskExecutionStatesOfJobs call as a whole (INTERNAL), and records
// the attempts its heartbeats carry.
type failingReportsJobMaster struct {
	offerTaker

	mu        sync.Mutex
	heartbeat []jobplanev1.ExecutionState // the states heartbeats carried
}

func (j *failingReportsJobMaster) UpdateTaskExecutionStatesOfJobs(context.Context, *clusterv1.UpdateTaskExecutionStatesOfJobsRequest) (*clusterv1.UpdateTaskExecutionStatesOfJobsResponse, error) {
	return nil, connect.NewError(connect.CodeInternal, errors.New("broken"))
}

func (j *failingReportsJobMaster) HeartbeatFromTaskExecutor(_ context.Context, req *clusterv1.HeartbeatFromTaskExecutorRequest) (*clusterv1.HeartbeatFromTaskExecutorResponse, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, job := range req.GetJobs() {
		for _, a := range job.GetAttempts() {
			j.heartbeat = append(j.heartbeat, a.GetState())
		}
	}
	return &clusterv1.HeartbeatFromTaskExecutorResponse{}, nil
}

// A report call that fails as a whole is no one job's refusal: its
// changes go with the next heartbeat, and the attempts keep running.
func TestAFailedReportCallStopsNoAttempt(t *testing.T) {
	jm := &failingReportsJobMaster{offerTaker: offerTaker{interval: 50 * time.Millisecond}}
	url := serveJobMaster(t, jm)
	stopped := make(chan struct{})
	te := startRunning(t, 1, map[string]taskexecutor.Invokable{
		"block": func(ctx context.Context, _ taskexecutor.Task) error {
			<-ctx.Done()
			close(stopped)
			return ctx.Err()
		},
	})
	ctx := context.Background()
	if _, err := te.RequestSlots(ctx, &clusterv1.RequestSlotsRequest{ResourceManagerToken: token(1), Slots: slotRequests(url, "j", 1, 1)}); err != nil {
		t.Fatal(err)
	}
	for {
		resp, err := te.SubmitTasks(ctx, &clusterv1.SubmitTasksRequest{JobId: "j", JobMasterToken: token(1), HeartbeatTimeout: jmTimeout, Tasks: []*clusterv1.TaskDeployment{
			{AllocationId: "ja", Attempt: &jobplanev1.ExecutionAttemptId{VertexId: "v"}, Invokable: "block"},
		}})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.GetRefused()) == 0 {
			break
		}
		time.Sleep(5 * time.Millisecond) // the slot's offer may not be answered yet
	}
	waitFor(t, "the RUNNING change in a heartbeat", func() bool {
		jm.mu.Lock()
		defer jm.mu.Unlock()
		return slices.Contains(jm.heartbeat, jobplanev1.ExecutionState_EXECUTION_STATE_RUNNING)
	})
	select {
	case <-stopped:
		t.Fatal("the attempt was stopped when its report call failed as a whole")
	default:
	}
}

package jobmaster

import (
	"context"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	"github.com/jobplane/jobplane/gen/jobplane/cluster/v1/clusterv1connect"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
)

// An offer that registers a TaskExecutor coming back after it was lost
// does not take again a slot the JobMaster gave up meanwhile: that slot
// is being freed on the TaskExecutor (the cleanup the registration
// starts), and an attempt deployed into it would be canceled with it.
// The answer names the JobMaster's heartbeat timeout.
func TestOfferFromALostTaskExecutorSkipsSlotsBeingFreed(t *testing.T) {
	t.Parallel()
	r := NewRouter(RouterConfig{})
	token := election.Token{SessionID: "s", Epoch: 1}
	jm := startRouted(t, r, "j", token)
	ctx := context.Background()
	if err := jm.do(ctx, func() { setKey(&jm.gone, "te-1", &gone{frees: []string{"given-up"}}) }); err != nil {
		t.Fatal(err)
	}
	resp, err := r.OfferSlots(ctx, &clusterv1.OfferSlotsRequest{
		JobId: "j", JobMasterToken: protoToken(token), TaskExecutorId: "te-1", Address: "http://127.0.0.1:2",
		Offers: []*clusterv1.SlotOffer{{AllocationId: "given-up", SlotIndex: 0}, {AllocationId: "fresh", SlotIndex: 1}},
	})
	if err != nil {
		t.Fatalf("OfferSlots: %v", err)
	}
	if a := resp.GetAccepted(); len(a) != 1 || a[0].GetAllocationId() != "fresh" {
		t.Errorf("accepted %v, want only the fresh slot", a)
	}
	if resp.GetHeartbeatTimeout().AsDuration() <= 0 {
		t.Errorf("heartbeat timeout %v in the answer of an offer that registered, want it set", resp.GetHeartbeatTimeout())
	}
}

// startRouted starts a JobMaster of a one-subtask job under token and
// routes its calls through r, until the test ends.
func startRouted(t *testing.T, r *Router, job string, token election.Token) *JobMaster {
	t.Helper()
	return startRoutedWith(t, r, job, token, 0)
}

// startRoutedWith is startRouted with the JobMaster's heartbeat interval
// (0: its default).
func startRoutedWith(t *testing.T, r *Router, job string, token election.Token, interval time.Duration) *JobMaster {
	t.Helper()
	jm, err := New(Config{
		JobID: job, Token: token, Address: "http://127.0.0.1:1", Router: r, HeartbeatInterval: interval,
		Graph:           &jobplanev1.JobGraph{Vertices: []*jobplanev1.JobVertex{{Id: "v", Invokable: "noop", Parallelism: 1}}},
		ResourceManager: clusterv1connect.NewResourceManagerServiceClient(http.DefaultClient, "http://127.0.0.1:1"),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	jm.Start(ctx, func(Result) { close(done) })
	t.Cleanup(func() { cancel(); <-done })
	r.Add(job, jm)
	return jm
}

// The state reports of several jobs in one call each reach their own
// JobMaster, fenced by their own token: an entry is refused as a whole as
// UpdateTaskExecutionStates would refuse it, and a change of a taken
// entry as that call would refuse the change, each by its index.
func TestStateReportsOfSeveralJobsAreRoutedAndFencedEach(t *testing.T) {
	t.Parallel()
	r := NewRouter(RouterConfig{})
	t1, t2 := election.Token{SessionID: "s", Epoch: 1}, election.Token{SessionID: "s", Epoch: 2}
	startRouted(t, r, "j1", t1)
	startRouted(t, r, "j2", t2)
	ctx := context.Background()
	unknown := &jobplanev1.TaskExecutionStatus{Attempt: &jobplanev1.ExecutionAttemptId{VertexId: "nope"}, State: jobplanev1.ExecutionState_EXECUTION_STATE_RUNNING}
	resp, err := r.UpdateTaskExecutionStatesOfJobs(ctx, &clusterv1.UpdateTaskExecutionStatesOfJobsRequest{TaskExecutorId: "te-1", Jobs: []*clusterv1.UpdateTaskExecutionStatesRequest{
		{JobId: "nobody", JobMasterToken: protoToken(t1)},
		{JobId: "j1", JobMasterToken: protoToken(t1), Statuses: []*jobplanev1.TaskExecutionStatus{unknown}},
		{JobId: "j2", JobMasterToken: protoToken(election.Token{SessionID: "other", Epoch: 2})},
		{JobId: "j2", JobMasterToken: protoToken(t2)},
	}})
	if err != nil {
		t.Fatalf("UpdateTaskExecutionStatesOfJobs: %v", err)
	}
	whole := map[int32]jobplanev1.ErrorReason{}
	for _, e := range resp.GetRefused() {
		whole[e.GetIndex()] = e.GetReason()
	}
	if len(whole) != 2 || whole[0] != jobplanev1.ErrorReason_ERROR_REASON_NOT_LEADER || whole[2] != jobplanev1.ErrorReason_ERROR_REASON_STALE_FENCING_TOKEN {
		t.Errorf("entries refused as a whole %v, want 0 NOT_LEADER and 2 STALE_FENCING_TOKEN", resp.GetRefused())
	}
	if n := len(resp.GetResults()); n != 4 {
		t.Fatalf("%d results, want one per entry", n)
	}
	if got := resp.GetResults()[1].GetRefused(); len(got) != 1 || got[0].GetIndex() != 0 || got[0].GetReason() != jobplanev1.ErrorReason_ERROR_REASON_EXECUTION_NOT_FOUND {
		t.Errorf("j1's changes refused %v, want its one change EXECUTION_NOT_FOUND", got)
	}
	for _, i := range []int{0, 2, 3} {
		if got := resp.GetResults()[i].GetRefused(); len(got) != 0 {
			t.Errorf("entry %d: changes refused %v, want none", i, got)
		}
	}

	// A change without its attempt: nothing is taken.
	_, err = r.UpdateTaskExecutionStatesOfJobs(ctx, &clusterv1.UpdateTaskExecutionStatesOfJobsRequest{TaskExecutorId: "te-1", Jobs: []*clusterv1.UpdateTaskExecutionStatesRequest{
		{JobId: "j1", JobMasterToken: protoToken(t1), Statuses: []*jobplanev1.TaskExecutionStatus{{State: jobplanev1.ExecutionState_EXECUTION_STATE_RUNNING}}},
	}})
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("a change without its attempt: %v, want INVALID_ARGUMENT", err)
	}
}

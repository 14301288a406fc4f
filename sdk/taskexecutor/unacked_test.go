package taskexecutor_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	"github.com/jobplane/jobplane/gen/jobplane/cluster/v1/clusterv1connect"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/taskexecutor"
)

// unreachableReportsJobMaster takes offers and heartbeats but refuses
// every state report as UNAVAILABLE, as a JobMaster process that just died
// (or was replaced) does; it records the attempts the heartbeats carry,
// by the token they were sent with.
type unreachableReportsJobMaster struct {
	clusterv1connect.UnimplementedJobMasterServiceHandler

	mu       sync.Mutex
	calls    int // heartbeats
	reported int // refused state reports
	beats    map[uint64][]*jobplanev1.TaskExecutionStatus
	beaten   map[uint64]int // heartbeats naming the job, by token epoch
}

func (j *unreachableReportsJobMaster) OfferSlots(_ context.Context, req *clusterv1.OfferSlotsRequest) (*clusterv1.OfferSlotsResponse, error) {
	return &clusterv1.OfferSlotsResponse{Accepted: req.GetOffers(), HeartbeatTimeout: durationpb.New(time.Minute), HeartbeatInterval: durationpb.New(20 * time.Millisecond)}, nil
}

func (j *unreachableReportsJobMaster) UpdateTaskExecutionStates(context.Context, *clusterv1.UpdateTaskExecutionStatesRequest) (*clusterv1.UpdateTaskExecutionStatesResponse, error) {
	j.mu.Lock()
	j.reported++
	j.mu.Unlock()
	return nil, connect.NewError(connect.CodeUnavailable, errors.New("going away"))
}

func (j *unreachableReportsJobMaster) HeartbeatFromTaskExecutor(_ context.Context, req *clusterv1.HeartbeatFromTaskExecutorRequest) (*clusterv1.HeartbeatFromTaskExecutorResponse, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.calls++
	for _, r := range req.GetJobs() {
		epoch := r.GetJobMasterToken().GetEpoch()
		j.beaten[epoch]++
		j.beats[epoch] = append(j.beats[epoch], r.GetAttempts()...)
	}
	return &clusterv1.HeartbeatFromTaskExecutorResponse{}, nil
}

// A state change whose report failed goes with the next heartbeats to its
// JobMaster, but only while that JobMaster is the job's: a newer JobMaster
// of the job at the same address (a jobmanager restarted on its port that
// leads again) numbers its attempts anew, and must not take the older
// one's failed attempt 0 for its own.
func TestUnackedChangesStayWithTheirJobMaster(t *testing.T) {
	jm := &unreachableReportsJobMaster{beats: map[uint64][]*jobplanev1.TaskExecutionStatus{}, beaten: map[uint64]int{}}
	url := serveJobMaster(t, jm)
	te := startRunning(t, 2, map[string]taskexecutor.Invokable{"fail": func(context.Context, taskexecutor.Task) error {
		return errors.New("failed at once")
	}})
	ctx := context.Background()
	if _, err := te.RequestSlots(ctx, &clusterv1.RequestSlotsRequest{ResourceManagerToken: token(1), Slots: slotRequests(url, "j", 5, 1)}); err != nil {
		t.Fatal(err)
	}
	attempt := &jobplanev1.ExecutionAttemptId{VertexId: "v"}
	if _, err := te.SubmitTasks(ctx, &clusterv1.SubmitTasksRequest{JobId: "j", JobMasterToken: token(5), HeartbeatTimeout: jmTimeout,
		Tasks: []*clusterv1.TaskDeployment{{AllocationId: "ja", Attempt: attempt, Invokable: "fail"}}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the failed attempt's report to be refused", func() bool {
		jm.mu.Lock()
		defer jm.mu.Unlock()
		return jm.reported > 0
	})

	// A newer JobMaster of the job, at the same address, takes a slot.
	req := slotRequests(url, "j", 6, 2)[1]
	if _, err := te.RequestSlots(ctx, &clusterv1.RequestSlotsRequest{ResourceManagerToken: token(1), Slots: []*clusterv1.SlotRequest{req}}); err != nil {
		t.Fatal(err)
	}
	// Once a heartbeat told the newer JobMaster about the job, three more
	// heartbeats: a change still waiting to be reported would have gone
	// with one of them.
	var after int
	waitFor(t, "a heartbeat to the newer JobMaster about the job", func() bool {
		jm.mu.Lock()
		defer jm.mu.Unlock()
		after = jm.calls
		return jm.beaten[6] >= 1
	})
	waitFor(t, "three more heartbeats", func() bool {
		jm.mu.Lock()
		defer jm.mu.Unlock()
		return jm.calls >= after+3
	})
	jm.mu.Lock()
	defer jm.mu.Unlock()
	for _, st := range jm.beats[6] {
		if st.GetAttempt().GetVertexId() == "v" {
			t.Errorf("a heartbeat under the newer token carried the older JobMaster's attempt: %v", st)
		}
	}
}

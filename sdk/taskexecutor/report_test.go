package taskexecutor

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"connectrpc.com/connect"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	"github.com/jobplane/jobplane/gen/jobplane/cluster/v1/clusterv1connect"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
)

// singleJobMaster lacks UpdateTaskExecutionStates. It refuses the change
// of attempt "gone" as unknown, fails the call for attempt "down" as
// unreachable, and takes the others; it records the attempts it was
// called for.
type singleJobMaster struct {
	clusterv1connect.UnimplementedJobMasterServiceHandler

	mu    sync.Mutex
	calls []string
}

func (j *singleJobMaster) UpdateTaskExecutionState(_ context.Context, req *clusterv1.UpdateTaskExecutionStateRequest) (*clusterv1.UpdateTaskExecutionStateResponse, error) {
	v := req.GetStatus().GetAttempt().GetVertexId()
	j.mu.Lock()
	j.calls = append(j.calls, v)
	j.mu.Unlock()
	switch v {
	case "gone":
		return nil, apierror.New(jobplanev1.ErrorReason_ERROR_REASON_EXECUTION_NOT_FOUND, "no such execution attempt", nil)
	case "down":
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("unreachable"))
	}
	return &clusterv1.UpdateTaskExecutionStateResponse{}, nil
}

// At a JobMaster without the batch call, changes go one per call until
// one fails for a reason not its own; the changes after it get that
// failure without a call each (which, at a JobMaster that does not
// answer, would cost a timeout each), while an unknown attempt is that
// change's refusal alone.
func TestOneChangePerCallStopsAtACallFailure(t *testing.T) {
	t.Parallel()
	fake := &singleJobMaster{}
	mux := http.NewServeMux()
	mux.Handle(clusterv1connect.NewJobMasterServiceHandler(fake))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	c := &jobMasterClient{JobMasterServiceClient: clusterv1connect.NewJobMasterServiceClient(srv.Client(), srv.URL)}

	vertices := []string{"a", "gone", "b", "down", "c", "d"}
	req := &clusterv1.UpdateTaskExecutionStatesRequest{JobId: "j", JobMasterToken: &jobplanev1.FencingToken{Epoch: 1}, TaskExecutorId: "te"}
	for _, v := range vertices {
		req.Statuses = append(req.Statuses, &jobplanev1.TaskExecutionStatus{Attempt: &jobplanev1.ExecutionAttemptId{VertexId: v}})
	}
	errs, answered := c.updateStates(context.Background(), req)
	if !c.single.Load() {
		t.Errorf("the client did not fall back to one change per call")
	}
	if !answered {
		t.Errorf("answered = false, want true (the first changes were taken)")
	}
	want := []connect.Code{0, connect.CodeNotFound, 0, connect.CodeUnavailable, connect.CodeUnavailable, connect.CodeUnavailable}
	for i, err := range errs {
		if got := connect.CodeOf(err); err == nil && want[i] != 0 || err != nil && got != want[i] {
			t.Errorf("change %d (%s): %v, want code %v", i, vertices[i], err, want[i])
		}
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	if got, want := len(fake.calls), 4; got != want {
		t.Errorf("calls for %v, want %d (none after the unreachable one)", fake.calls, want)
	}
}

package jobmaster

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"connectrpc.com/connect"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
	"github.com/jobplane/jobplane/server/internal/apierror"
	"github.com/jobplane/jobplane/server/internal/endpoint"
)

// fakeTaskExecutor serves SubmitTask(s) and FreeSlot(s), refusing the
// allocation "taken", and counts the calls; without batch it lacks the
// batch calls, as a TaskExecutor of another implementation may.
type fakeTaskExecutor struct {
	jobplanev1connect.UnimplementedTaskExecutorServiceHandler
	batch bool

	mu    sync.Mutex
	calls map[string]int
	items int
}

func (f *fakeTaskExecutor) count(method string, items int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[method]++
	f.items += items
}

func taken(aid string) error {
	if aid == "taken" {
		return apierror.New(jobplanev1.ErrorReason_ERROR_REASON_SLOT_OCCUPIED, "taken", map[string]string{"allocation_id": aid})
	}
	return nil
}

func (f *fakeTaskExecutor) SubmitTask(_ context.Context, req *jobplanev1.SubmitTaskRequest) (*jobplanev1.SubmitTaskResponse, error) {
	f.count("SubmitTask", 1)
	if err := taken(req.GetAllocationId()); err != nil {
		return nil, err
	}
	return &jobplanev1.SubmitTaskResponse{}, nil
}

func (f *fakeTaskExecutor) SubmitTasks(_ context.Context, req *jobplanev1.SubmitTasksRequest) (*jobplanev1.SubmitTasksResponse, error) {
	if !f.batch {
		return nil, connect.NewError(connect.CodeUnimplemented, nil)
	}
	f.count("SubmitTasks", len(req.GetTasks()))
	resp := &jobplanev1.SubmitTasksResponse{}
	for i, d := range req.GetTasks() {
		if err := taken(d.GetAllocationId()); err != nil {
			resp.Refused = append(resp.Refused, apierror.Item(i, err))
		}
	}
	return resp, nil
}

func (f *fakeTaskExecutor) FreeSlot(_ context.Context, req *jobplanev1.FreeSlotRequest) (*jobplanev1.FreeSlotResponse, error) {
	f.count("FreeSlot", 1)
	return &jobplanev1.FreeSlotResponse{}, taken(req.GetAllocationId())
}

func (f *fakeTaskExecutor) FreeSlots(_ context.Context, req *jobplanev1.FreeSlotsRequest) (*jobplanev1.FreeSlotsResponse, error) {
	if !f.batch {
		return nil, connect.NewError(connect.CodeUnimplemented, nil)
	}
	f.count("FreeSlots", len(req.GetAllocationIds()))
	return &jobplanev1.FreeSlotsResponse{}, nil
}

// The shared client deploys and frees a job's attempts and slots on a
// TaskExecutor in one call each; at a TaskExecutor without the batch
// calls it makes one call per item, with the same outcome per item.
func TestExecutorClientBatchesAndFallsBack(t *testing.T) {
	t.Parallel()
	for _, batch := range []bool{true, false} {
		t.Run(fmt.Sprintf("batch=%v", batch), func(t *testing.T) {
			t.Parallel()
			fake := &fakeTaskExecutor{batch: batch, calls: map[string]int{}}
			mux := http.NewServeMux()
			mux.Handle(jobplanev1connect.NewTaskExecutorServiceHandler(fake))
			srv := httptest.NewServer(mux)
			t.Cleanup(srv.Close)
			c := &executorClient{TaskExecutorServiceClient: jobplanev1connect.NewTaskExecutorServiceClient(srv.Client(), srv.URL, endpoint.ClientOptions()...)}
			ctx := context.Background()
			token := &jobplanev1.FencingToken{SessionId: "s", Epoch: 1}
			var tasks []*jobplanev1.TaskDeployment
			for _, aid := range []string{"a", "taken", "b", "c"} {
				tasks = append(tasks, &jobplanev1.TaskDeployment{AllocationId: aid, Attempt: &jobplanev1.ExecutionAttemptId{VertexId: aid}, Invokable: "noop"})
			}
			for round := range 2 { // the second round knows whether batches work
				errs := c.submitTasks(ctx, "j", token, tasks)
				for i, err := range errs {
					if want := i == 1; (err != nil) != want || want && !apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_SLOT_OCCUPIED) {
						t.Errorf("round %d: task %d: %v, want refused: %v (SLOT_OCCUPIED)", round, i, err, want)
					}
				}
				freed := c.freeSlots(ctx, "j", token, []string{"a", "b", "c"}, "test")
				if len(freed) != 3 {
					t.Errorf("round %d: freed %v, want a, b and c", round, freed)
				}
			}
			fake.mu.Lock()
			defer fake.mu.Unlock()
			want := map[string]int{"SubmitTasks": 2, "FreeSlots": 2}
			if !batch {
				want = map[string]int{"SubmitTask": 8, "FreeSlot": 6}
			}
			if fmt.Sprint(fake.calls) != fmt.Sprint(want) {
				t.Errorf("calls %v, want %v", fake.calls, want)
			}
		})
	}
}

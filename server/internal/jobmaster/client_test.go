package jobmaster

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"connectrpc.com/connect"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	"github.com/jobplane/jobplane/gen/jobplane/cluster/v1/clusterv1connect"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
	"github.com/jobplane/jobplane/server/internal/endpoint"
)

// Every JobMaster of a process that uses a TaskExecutor holds the
// process's one client of it (a pointer), not a client of its own; a
// TaskExecutor at a new address gets a new client.
func TestJobMastersShareOneClientPerTaskExecutor(t *testing.T) {
	t.Parallel()
	r := NewRouter(RouterConfig{})
	newJM := func(job string) *JobMaster {
		jm, err := New(Config{
			JobID: job, Token: election.Token{SessionID: "s", Epoch: 1}, Address: "http://127.0.0.1:1", Router: r,
			Graph:           &jobplanev1.JobGraph{Vertices: []*jobplanev1.JobVertex{{Id: "v", Invokable: "noop", Parallelism: 1}}},
			ResourceManager: clusterv1connect.NewResourceManagerServiceClient(http.DefaultClient, "http://127.0.0.1:1"),
		})
		if err != nil {
			t.Fatal(err)
		}
		return jm
	}
	var jms []*JobMaster
	for i := range 3 {
		jm := newJM(fmt.Sprint("job", i))
		jm.registerExecutor("te-1", "http://127.0.0.1:2")
		jm.registerExecutor("te-2", "http://127.0.0.1:3")
		jms = append(jms, jm)
	}
	for _, id := range []string{"te-1", "te-2"} {
		first := jms[0].executors[id].client
		if first == nil {
			t.Fatalf("%s: no client", id)
		}
		for i, jm := range jms[1:] {
			if got := jm.executors[id].client; got != first {
				t.Errorf("%s: JobMaster %d holds client %p, JobMaster 0 %p; want the one shared client", id, i+1, got, first)
			}
		}
	}
	if jms[0].executors["te-1"].client == jms[0].executors["te-2"].client {
		t.Error("two TaskExecutors share a client")
	}
	// The TaskExecutor came back elsewhere: the next registration gets a
	// client of the new address.
	old := jms[0].executors["te-1"].client
	jms[1].registerExecutor("te-1", "http://127.0.0.1:4")
	if got := jms[1].executors["te-1"].client; got == old {
		t.Error("a TaskExecutor at a new address kept the client of the old one")
	}
}

// fakeTaskExecutor serves SubmitTask(s), CancelTask and FreeSlot(s), refusing the
// allocation "taken", and counts the calls; without batch it lacks the
// batch calls, as a TaskExecutor of another implementation may.
type fakeTaskExecutor struct {
	clusterv1connect.UnimplementedTaskExecutorServiceHandler
	batch bool

	mu    sync.Mutex
	calls map[string]int
}

func (f *fakeTaskExecutor) count(method string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[method]++
}

func taken(aid string) error {
	if aid == "taken" {
		return apierror.New(jobplanev1.ErrorReason_ERROR_REASON_SLOT_OCCUPIED, "taken", map[string]string{"allocation_id": aid})
	}
	return nil
}

func (f *fakeTaskExecutor) SubmitTask(_ context.Context, req *clusterv1.SubmitTaskRequest) (*clusterv1.SubmitTaskResponse, error) {
	f.count("SubmitTask")
	if err := taken(req.GetAllocationId()); err != nil {
		return nil, err
	}
	return &clusterv1.SubmitTaskResponse{}, nil
}

func (f *fakeTaskExecutor) SubmitTasks(_ context.Context, req *clusterv1.SubmitTasksRequest) (*clusterv1.SubmitTasksResponse, error) {
	if !f.batch {
		return nil, connect.NewError(connect.CodeUnimplemented, nil)
	}
	f.count("SubmitTasks")
	resp := &clusterv1.SubmitTasksResponse{}
	for i, d := range req.GetTasks() {
		if err := taken(d.GetAllocationId()); err != nil {
			resp.Refused = append(resp.Refused, apierror.Item(i, err))
		}
	}
	return resp, nil
}

func (f *fakeTaskExecutor) CancelTask(context.Context, *clusterv1.CancelTaskRequest) (*clusterv1.CancelTaskResponse, error) {
	f.count("CancelTask")
	return &clusterv1.CancelTaskResponse{}, nil
}

func (f *fakeTaskExecutor) FreeSlot(_ context.Context, req *clusterv1.FreeSlotRequest) (*clusterv1.FreeSlotResponse, error) {
	f.count("FreeSlot")
	return &clusterv1.FreeSlotResponse{}, taken(req.GetAllocationId())
}

func (f *fakeTaskExecutor) FreeSlots(_ context.Context, req *clusterv1.FreeSlotsRequest) (*clusterv1.FreeSlotsResponse, error) {
	if !f.batch {
		return nil, connect.NewError(connect.CodeUnimplemented, nil)
	}
	f.count("FreeSlots")
	return &clusterv1.FreeSlotsResponse{}, nil
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
			mux.Handle(clusterv1connect.NewTaskExecutorServiceHandler(fake))
			srv := httptest.NewServer(mux)
			t.Cleanup(srv.Close)
			c := &executorClient{TaskExecutorServiceClient: clusterv1connect.NewTaskExecutorServiceClient(srv.Client(), srv.URL, endpoint.ClientOptions()...)}
			ctx := context.Background()
			token := &jobplanev1.FencingToken{SessionId: "s", Epoch: 1}
			var tasks []*clusterv1.TaskDeployment
			for _, aid := range []string{"a", "taken", "b", "c"} {
				tasks = append(tasks, &clusterv1.TaskDeployment{AllocationId: aid, Attempt: &jobplanev1.ExecutionAttemptId{VertexId: aid}, Invokable: "noop"})
			}
			for round := range 2 { // the second round knows whether batches work
				errs := c.submitTasks(ctx, "j", token, nil, nil, tasks)
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

package jobmaster

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	"github.com/jobplane/jobplane/gen/jobplane/cluster/v1/clusterv1connect"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/sdk/wire/transport"
)

// A JobMaster that stopped with the job's end still tells where its
// attempts ran: the Dispatcher reads task output through it until it
// keeps the ended job's placements itself, and must not find nothing in
// between.
func TestLocateAfterTheJobEnded(t *testing.T) {
	fake := &fakeTaskExecutor{batch: true, calls: map[string]int{}}
	mux := http.NewServeMux()
	mux.Handle(clusterv1connect.NewTaskExecutorServiceHandler(fake))
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.Protocols = transport.ServerProtocols()
	srv.Start()
	t.Cleanup(srv.Close)

	r := NewRouter(RouterConfig{})
	token := election.Token{SessionID: "s", Epoch: 1}
	jm, err := New(Config{
		JobID: "j", Token: token, Address: "http://127.0.0.1:1", Router: r,
		Graph:           &jobplanev1.JobGraph{Vertices: []*jobplanev1.JobVertex{{Id: "v", Invokable: "noop", Parallelism: 1}}},
		ResourceManager: clusterv1connect.NewResourceManagerServiceClient(http.DefaultClient, "http://127.0.0.1:1"),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ended := make(chan Result, 1)
	jm.Start(ctx, func(res Result) { ended <- res })
	r.Add("j", jm)

	if _, err := r.OfferSlots(ctx, &clusterv1.OfferSlotsRequest{
		JobId: "j", JobMasterToken: protoToken(token), TaskExecutorId: "te-1", Address: srv.URL,
		Offers: []*clusterv1.SlotOffer{{AllocationId: "a", SlotIndex: 0}}, DeploymentsInAnswer: true,
	}); err != nil {
		t.Fatalf("OfferSlots: %v", err)
	}
	for _, state := range []jobplanev1.ExecutionState{jobplanev1.ExecutionState_EXECUTION_STATE_RUNNING, jobplanev1.ExecutionState_EXECUTION_STATE_FINISHED} {
		if _, err := r.UpdateTaskExecutionState(ctx, &clusterv1.UpdateTaskExecutionStateRequest{
			JobId: "j", JobMasterToken: protoToken(token), TaskExecutorId: "te-1", Status: &jobplanev1.TaskExecutionStatus{
				Attempt: &jobplanev1.ExecutionAttemptId{VertexId: "v"}, State: state,
			},
		}); err != nil {
			t.Fatalf("UpdateTaskExecutionState %v: %v", state, err)
		}
	}
	select {
	case res := <-ended:
		if res.Status != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
			t.Fatalf("the job ended %v, want FINISHED", res.Status)
		}
	case <-ctx.Done():
		t.Fatal("the job did not end")
	}
	p, err := jm.Locate(ctx, "v", 0, 0)
	if err != nil || p.TaskExecutorID != "te-1" || p.Attempt != 0 {
		t.Fatalf("Locate after the end = %+v, %v; want attempt 0 on te-1", p, err)
	}
	if _, err := jm.Locate(ctx, "w", 0, 0); err != ErrUnknownVertex {
		t.Errorf("Locate of an unknown vertex after the end: %v, want ErrUnknownVertex", err)
	}
}

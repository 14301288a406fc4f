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

// An attempt the JobMaster cancels while it is still DEPLOYING (its
// deployment went out in an offer's answer, and no state confirmed it
// yet) ends CANCELED when its TaskExecutor reports it canceled: the
// report answers the JobMaster's own request, so it is no failure, and
// the canceled job's subtask shows CANCELED, not FAILED.
func TestAttemptCanceledWhileDeployingEndsCanceled(t *testing.T) {
	t.Parallel()
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
		JobID: "j", Token: token, Address: "http://127.0.0.1:1", Router: r, HeartbeatInterval: time.Hour,
		Graph:           &jobplanev1.JobGraph{Vertices: []*jobplanev1.JobVertex{{Id: "v", Invokable: "noop", Parallelism: 1}}},
		ResourceManager: clusterv1connect.NewResourceManagerServiceClient(http.DefaultClient, "http://127.0.0.1:1"),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	results := make(chan Result, 1)
	jm.Start(ctx, func(res Result) { results <- res })
	r.Add("j", jm)

	resp, err := r.OfferSlots(ctx, &clusterv1.OfferSlotsRequest{
		JobId: "j", JobMasterToken: protoToken(token), TaskExecutorId: "te-1", Address: srv.URL,
		Offers: []*clusterv1.SlotOffer{{AllocationId: "a", SlotIndex: 0}}, DeploymentsInAnswer: true,
	})
	if err != nil || len(resp.GetDeployments()) != 1 {
		t.Fatalf("OfferSlots = %v, %v; want one deployment in the answer", resp, err)
	}
	if _, err := jm.Cancel(ctx); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	if _, err := r.UpdateTaskExecutionState(ctx, &clusterv1.UpdateTaskExecutionStateRequest{
		JobId: "j", JobMasterToken: protoToken(token), TaskExecutorId: "te-1", Status: &jobplanev1.TaskExecutionStatus{
			Attempt: &jobplanev1.ExecutionAttemptId{VertexId: "v"}, State: jobplanev1.ExecutionState_EXECUTION_STATE_CANCELED,
		},
	}); err != nil {
		t.Fatalf("UpdateTaskExecutionState: %v", err)
	}
	var res Result
	select {
	case res = <-results:
	case <-time.After(30 * time.Second):
		t.Fatal("the job did not end within 30s")
	}
	if res.Status != jobplanev1.JobStatus_JOB_STATUS_CANCELED || len(res.Exceptions) != 0 {
		t.Errorf("the job ended %v with exceptions %v; want CANCELED with none", res.Status, res.Exceptions)
	}
	d, _ := res.Final.Details(&jobplanev1.JobSummary{}, nil, true, Page{Size: 10})
	sub := d.GetVertices()[0].GetSubtasks()[0]
	if sub.GetState() != jobplanev1.ExecutionState_EXECUTION_STATE_CANCELED || sub.GetFailure() != nil {
		t.Errorf("the subtask ended %v (failure %v), want CANCELED without a failure", sub.GetState(), sub.GetFailure())
	}
}

package jobmaster

import (
	"context"
	"testing"
	"time"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	"github.com/jobplane/jobplane/gen/jobplane/cluster/v1/clusterv1connect"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/sdk/wire/jobstatus"
)

// fakeRM is a ResourceManager in the JobMaster's process. With block,
// RegisterJobMaster reports its start on started and returns only once
// its call is cut off, closing cutOff; otherwise the JobMaster's calls
// are taken at once.
type fakeRM struct {
	clusterv1connect.ResourceManagerServiceClient // other calls panic
	block                                         bool
	started, cutOff                               chan struct{}
}

func (rm *fakeRM) RegisterJobMaster(ctx context.Context, _ *clusterv1.RegisterJobMasterRequest) (*clusterv1.RegisterJobMasterResponse, error) {
	if rm.block {
		rm.started <- struct{}{}
		<-ctx.Done()
		close(rm.cutOff)
		return nil, ctx.Err()
	}
	return &clusterv1.RegisterJobMasterResponse{ResourceManagerToken: &jobplanev1.FencingToken{SessionId: "rm", Epoch: 1}}, nil
}

func (rm *fakeRM) DeclareResourceRequirements(context.Context, *clusterv1.DeclareResourceRequirementsRequest) (*clusterv1.DeclareResourceRequirementsResponse, error) {
	return &clusterv1.DeclareResourceRequirementsResponse{}, nil
}

func (rm *fakeRM) DisconnectJobMaster(context.Context, *clusterv1.DisconnectJobMasterRequest) (*clusterv1.DisconnectJobMasterResponse, error) {
	return &clusterv1.DisconnectJobMasterResponse{}, nil
}

func newWaitingJobMaster(t *testing.T, rm clusterv1connect.ResourceManagerServiceClient) *JobMaster {
	t.Helper()
	jm, err := New(Config{
		JobID: "j", Token: election.Token{SessionID: "s", Epoch: 1}, Address: "http://127.0.0.1:1", Router: NewRouter(RouterConfig{}),
		Graph:           &jobplanev1.JobGraph{Vertices: []*jobplanev1.JobVertex{{Id: "v", Invokable: "noop", Parallelism: 1}}},
		ResourceManager: rm,
	})
	if err != nil {
		t.Fatal(err)
	}
	return jm
}

// A JobMaster that waits for slots, its declaration taken, keeps no RPC
// context (issue 33: a waiting job's bytes): the one its calls ran under
// is dropped with the last of them.
func TestWaitingJobMasterKeepsNoRPCContext(t *testing.T) {
	t.Parallel()
	jm := newWaitingJobMaster(t, &fakeRM{})
	ctx, cancel := context.WithCancel(context.Background())
	results := make(chan Result, 1)
	jm.Start(ctx, func(res Result) { results <- res })
	deadline := time.Now().Add(5 * time.Second)
	for {
		var declared bool
		if err := jm.do(ctx, func() { declared = jm.declared == 1 && !jm.declaring }); err != nil {
			t.Fatal(err)
		}
		jm.mu.Lock()
		kept, inFlight := jm.rpcCtx != nil, jm.inFlight
		jm.mu.Unlock()
		if declared && !kept && inFlight == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("5s on: declared %v, RPC context kept %v, %d calls in flight; want declared, none kept, none in flight", declared, kept, inFlight)
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	select {
	case res := <-results:
		if res.Status != jobstatus.Suspended {
			t.Errorf("the JobMaster ended %v, want SUSPENDED", res.Status)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the JobMaster did not stop within 5s of its context's end")
	}
}

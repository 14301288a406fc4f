package jobmaster

import (
	"context"
	"net/http"
	"testing"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
	"github.com/jobplane/jobplane/server/hastore"
)

// An offer that registers a TaskExecutor coming back after it was lost
// does not take again a slot the JobMaster gave up meanwhile: that slot
// is being freed on the TaskExecutor (the cleanup the registration
// starts), and an attempt deployed into it would be canceled with it.
// The answer names the JobMaster's heartbeat timeout.
func TestOfferFromALostTaskExecutorSkipsSlotsBeingFreed(t *testing.T) {
	t.Parallel()
	r := NewRouter(RouterConfig{})
	token := hastore.Token{SessionID: "s", Epoch: 1}
	jm, err := New(Config{
		JobID: "j", Token: token, Address: "http://127.0.0.1:1", Router: r,
		Graph:           &jobplanev1.JobGraph{Vertices: []*jobplanev1.JobVertex{{Id: "v", Invokable: "noop", Parallelism: 1}}},
		ResourceManager: jobplanev1connect.NewResourceManagerServiceClient(http.DefaultClient, "http://127.0.0.1:1"),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	jm.Start(ctx, func(Result) { close(done) })
	t.Cleanup(func() { cancel(); <-done })
	r.Add("j", jm)
	if err := jm.do(ctx, func() { jm.gone["te-1"] = &gone{frees: []string{"given-up"}} }); err != nil {
		t.Fatal(err)
	}
	resp, err := r.OfferSlots(ctx, &jobplanev1.OfferSlotsRequest{
		JobId: "j", JobMasterToken: protoToken(token), TaskExecutorId: "te-1", Address: "http://127.0.0.1:2",
		Offers: []*jobplanev1.SlotOffer{{AllocationId: "given-up", SlotIndex: 0}, {AllocationId: "fresh", SlotIndex: 1}},
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

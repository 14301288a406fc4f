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

// An offer that takes deployments in its answer gets the attempt deployed
// into its slot there, under the offer's job and token. Once a state of
// the attempt comes from the TaskExecutor, no SubmitTasks follows;
// without one, SubmitTasks sends the attempt again after the heartbeat
// interval (the answer may have been lost), and the offer sent again
// before that is answered with it again. An attempt canceled while its
// deployment is in flight is canceled again once a state confirms the
// deployment, as when a SubmitTasks call returns. A TaskExecutor that
// does not take deployments in answers gets SubmitTasks at once.
func TestDeploymentsInTheOfferAnswer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                               string
		inAnswer, confirm, reoffer, cancel bool
		interval                           time.Duration
		submits                            int // SubmitTasks calls to wait for
	}{
		{name: "canceled in flight", inAnswer: true, cancel: true, confirm: true, interval: time.Hour},
		// The confirmation comes well within the interval, even on a
		// loaded machine.
		{name: "confirmed", inAnswer: true, confirm: true, interval: 500 * time.Millisecond},
		{name: "unconfirmed", inAnswer: true, interval: 50 * time.Millisecond, submits: 1},
		{name: "offered again", inAnswer: true, reoffer: true, interval: time.Hour},
		{name: "not taken in answers", interval: time.Hour, submits: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fake := &fakeTaskExecutor{batch: true, calls: map[string]int{}}
			mux := http.NewServeMux()
			mux.Handle(clusterv1connect.NewTaskExecutorServiceHandler(fake))
			srv := httptest.NewUnstartedServer(mux)
			srv.Config.Protocols = transport.ServerProtocols() // the JobMaster's client speaks h2c
			srv.Start()
			t.Cleanup(srv.Close)
			r := NewRouter(RouterConfig{})
			token := election.Token{SessionID: "s", Epoch: 1}
			jm := startRoutedWith(t, r, "j", token, tc.interval)
			ctx := context.Background()
			offer := &clusterv1.OfferSlotsRequest{
				JobId: "j", JobMasterToken: protoToken(token), TaskExecutorId: "te-1", Address: srv.URL,
				Offers: []*clusterv1.SlotOffer{{AllocationId: "a", SlotIndex: 0}}, DeploymentsInAnswer: tc.inAnswer,
			}
			resp, err := r.OfferSlots(ctx, offer)
			if err != nil {
				t.Fatalf("OfferSlots: %v", err)
			}
			wantIn := 0
			if tc.inAnswer {
				wantIn = 1
			}
			checkAnswer := func(resp *clusterv1.OfferSlotsResponse) {
				t.Helper()
				d := resp.GetDeployments()
				if len(d) != wantIn {
					t.Fatalf("%d deployments in the answer, want %d", len(d), wantIn)
				}
				if wantIn == 1 && (d[0].GetAllocationId() != "a" || d[0].GetAttempt().GetVertexId() != "v" || d[0].GetInvokable() != "noop") {
					t.Errorf("deployment in the answer %v, want v's attempt into allocation a", d[0])
				}
				if wantIn == 1 && resp.GetHeartbeatTimeout().AsDuration() <= 0 {
					t.Error("an answer with deployments names no heartbeat timeout")
				}
			}
			checkAnswer(resp)
			if tc.reoffer {
				resp, err := r.OfferSlots(ctx, offer)
				if err != nil {
					t.Fatalf("OfferSlots again: %v", err)
				}
				checkAnswer(resp)
			}
			if tc.cancel {
				if _, err := jm.Cancel(ctx); err != nil {
					t.Fatalf("Cancel: %v", err)
				}
			}
			if tc.confirm {
				if _, err := r.UpdateTaskExecutionState(ctx, &clusterv1.UpdateTaskExecutionStateRequest{
					JobId: "j", JobMasterToken: protoToken(token), TaskExecutorId: "te-1", Status: &jobplanev1.TaskExecutionStatus{
						Attempt: &jobplanev1.ExecutionAttemptId{VertexId: "v"}, State: jobplanev1.ExecutionState_EXECUTION_STATE_RUNNING,
					},
				}); err != nil {
					t.Fatalf("UpdateTaskExecutionState: %v", err)
				}
			}
			calls := func(method string) int {
				fake.mu.Lock()
				defer fake.mu.Unlock()
				return fake.calls[method]
			}
			submits := func() int { return calls("SubmitTasks") }
			if tc.cancel {
				// One CancelTask at once, one once the deployment is
				// confirmed.
				for deadline := time.Now().Add(10 * time.Second); calls("CancelTask") < 2; time.Sleep(5 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatalf("%d CancelTask calls after 10s, want 2", calls("CancelTask"))
					}
				}
			}
			if tc.submits > 0 {
				for deadline := time.Now().Add(10 * time.Second); submits() < tc.submits; time.Sleep(5 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatalf("%d SubmitTasks calls after 10s, want %d", submits(), tc.submits)
					}
				}
			}
			// No more calls come: past two intervals, where there is one
			// to pass.
			if tc.interval < time.Second {
				time.Sleep(2 * tc.interval)
			}
			if n := submits(); n != tc.submits {
				t.Errorf("%d SubmitTasks calls, want %d", n, tc.submits)
			}
		})
	}
}

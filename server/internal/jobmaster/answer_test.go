package jobmaster

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/internal/apierror"
	"github.com/jobplane/jobplane/server/internal/endpoint"
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
			fake, url := serveFakeTaskExecutor(t)
			r := NewRouter(RouterConfig{})
			token := hastore.Token{SessionID: "s", Epoch: 1}
			jm := startRoutedWith(t, r, "j", token, tc.interval)
			ctx := context.Background()
			offer := &jobplanev1.OfferSlotsRequest{
				JobId: "j", JobMasterToken: protoToken(token), TaskExecutorId: "te-1", Address: url,
				Offers: []*jobplanev1.SlotOffer{{AllocationId: "a", SlotIndex: 0}}, DeploymentsInAnswer: tc.inAnswer,
			}
			resp, err := r.OfferSlots(ctx, offer)
			if err != nil {
				t.Fatalf("OfferSlots: %v", err)
			}
			wantIn := 0
			if tc.inAnswer {
				wantIn = 1
			}
			checkAnswer := func(resp *jobplanev1.OfferSlotsResponse) {
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
				if _, err := r.UpdateTaskExecutionState(ctx, &jobplanev1.UpdateTaskExecutionStateRequest{
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

// An offer on a TaskExecutor's behalf (the ResourceManager's, before the
// TaskExecutor knows of the slot) is taken only for a TaskExecutor this
// process heard from at that address, and does not count as hearing it:
// its deadlines here keep counting from its own last call. The answer
// carries the attempt deployed into the slot, as an offer's that takes
// deployments in its answer does.
func TestOfferOnBehalfOfAHeardTaskExecutor(t *testing.T) {
	t.Parallel()
	r := NewRouter(RouterConfig{})
	token := hastore.Token{SessionID: "s", Epoch: 1}
	startRoutedWith(t, r, "j", token, time.Hour)
	ctx := context.Background()
	offers := []*jobplanev1.SlotOffer{{AllocationId: "a", SlotIndex: 0}}
	const address = "http://127.0.0.1:2"
	if _, err := r.OfferOnBehalf(ctx, "j", protoToken(token), "te-1", address, offers); !apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_NOT_REGISTERED) {
		t.Fatalf("on behalf of a TaskExecutor never heard: %v, want NOT_REGISTERED", err)
	}
	if heard := r.lastHeard("te-1"); !heard.IsZero() {
		t.Fatalf("the refused offer made the TaskExecutor known, heard at %v", heard)
	}
	// The TaskExecutor calls this process (a heartbeat).
	if _, err := r.HeartbeatFromTaskExecutor(ctx, &jobplanev1.HeartbeatFromTaskExecutorRequest{TaskExecutorId: "te-1", Address: address, Full: true}); err != nil {
		t.Fatal(err)
	}
	heard := r.lastHeard("te-1")
	if _, err := r.OfferOnBehalf(ctx, "j", protoToken(token), "te-1", "http://127.0.0.1:3", offers); !apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_NOT_REGISTERED) {
		t.Fatalf("on behalf of the TaskExecutor at another address: %v, want NOT_REGISTERED", err)
	}
	resp, err := r.OfferOnBehalf(ctx, "j", protoToken(token), "te-1", address, offers)
	if err != nil {
		t.Fatalf("on behalf of a TaskExecutor heard: %v", err)
	}
	if d := resp.GetDeployments(); len(d) != 1 || d[0].GetAllocationId() != "a" || d[0].GetAttempt().GetVertexId() != "v" {
		t.Errorf("deployments %v, want v's attempt into allocation a", d)
	}
	if len(resp.GetAccepted()) != 1 || resp.GetHeartbeatTimeout().AsDuration() <= 0 {
		t.Errorf("answer %v, want the slot accepted and the heartbeat timeout named", resp)
	}
	if now := r.lastHeard("te-1"); !now.Equal(heard) {
		t.Errorf("the TaskExecutor was last heard at %v after the offer on its behalf, want still %v", now, heard)
	}
}

// What the ResourceManager reports of a slot taken on its TaskExecutor's
// behalf decides what becomes of the deployment that went with it:
// taken, it is confirmed and not sent again; not taken, it goes in the
// answer to the TaskExecutor's own offer of the slot, or by SubmitTasks
// if that offer was answered already (before the outcome was known, its
// answer leaves the deployment out); refused, the slot is dropped (and
// its attempt waits for another, with no failure counted); once the
// deployment is known taken (by the outcome or a state of the attempt),
// or the slot offered, the slot takes SubmitTasks again; an
// unknown outcome with no offer of the slot in the heartbeat interval
// drops the slot and cancels the attempt there, without SubmitTasks.
func TestOutcomesOfSlotsTakenOnBehalf(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		outcome  SlotOutcome
		offered  bool // the TaskExecutor's own offer comes before the outcome
		running  bool // a RUNNING state of the attempt comes before the outcome
		interval time.Duration
		// What follows: the deployment in the answer to the offer made
		// after the outcome (if not offered before), SubmitTasks calls,
		// whether the slot is still held, CancelTask calls.
		inAnswer, submits, cancels int
		held                       bool
	}{
		{name: "deployed", outcome: SlotDeployed, interval: time.Hour, held: true},
		{name: "held, not offered yet", outcome: SlotHeld, interval: time.Hour, inAnswer: 1, held: true},
		{name: "held, offered already", outcome: SlotHeld, offered: true, interval: time.Hour, submits: 1, held: true},
		{name: "refused", outcome: SlotRefused, interval: time.Hour},
		{name: "unknown, never offered", outcome: SlotUnknown, interval: 50 * time.Millisecond, cancels: 1},
		{name: "unknown, but a state came", outcome: SlotUnknown, running: true, interval: time.Hour, held: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fake, url := serveFakeTaskExecutor(t)
			r := NewRouter(RouterConfig{})
			token := hastore.Token{SessionID: "s", Epoch: 1}
			jm := startRoutedWith(t, r, "j", token, tc.interval)
			ctx := context.Background()
			if _, err := r.HeartbeatFromTaskExecutor(ctx, &jobplanev1.HeartbeatFromTaskExecutorRequest{TaskExecutorId: "te-1", Address: url, Full: true}); err != nil {
				t.Fatal(err)
			}
			offers := []*jobplanev1.SlotOffer{{AllocationId: "a", SlotIndex: 0}}
			resp, err := r.OfferOnBehalf(ctx, "j", protoToken(token), "te-1", url, offers)
			if err != nil || len(resp.GetDeployments()) != 1 {
				t.Fatalf("OfferOnBehalf: %v, %v; want one deployment", resp, err)
			}
			offer := func() int {
				t.Helper()
				resp, err := r.OfferSlots(ctx, &jobplanev1.OfferSlotsRequest{
					JobId: "j", JobMasterToken: protoToken(token), TaskExecutorId: "te-1", Address: url, Offers: offers, DeploymentsInAnswer: true,
				})
				if err != nil {
					t.Fatalf("OfferSlots: %v", err)
				}
				return len(resp.GetDeployments())
			}
			if tc.offered {
				if n := offer(); n != 0 {
					t.Errorf("the offer before the outcome is answered with %d deployments, want none", n)
				}
			}
			if tc.running {
				if _, err := r.UpdateTaskExecutionState(ctx, &jobplanev1.UpdateTaskExecutionStateRequest{
					JobId: "j", JobMasterToken: protoToken(token), TaskExecutorId: "te-1", Status: &jobplanev1.TaskExecutionStatus{
						Attempt: &jobplanev1.ExecutionAttemptId{VertexId: "v"}, State: jobplanev1.ExecutionState_EXECUTION_STATE_RUNNING,
					},
				}); err != nil {
					t.Fatalf("UpdateTaskExecutionState: %v", err)
				}
			}
			r.SlotsRequested(ctx, "j", protoToken(token), "te-1", map[string]SlotOutcome{"a": tc.outcome})
			calls := func(method string) int {
				fake.mu.Lock()
				defer fake.mu.Unlock()
				return fake.calls[method]
			}
			if tc.cancels > 0 {
				for deadline := time.Now().Add(10 * time.Second); calls("CancelTask") < tc.cancels; time.Sleep(5 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatalf("%d CancelTask calls in 10s, want %d", calls("CancelTask"), tc.cancels)
					}
				}
			}
			if !tc.offered && tc.held && tc.outcome == SlotHeld { // a TaskExecutor offers only slots it holds and took no deployment into
				if n := offer(); n != tc.inAnswer {
					t.Errorf("the offer after the outcome is answered with %d deployments, want %d", n, tc.inAnswer)
				}
			}
			for deadline := time.Now().Add(10 * time.Second); calls("SubmitTasks") < tc.submits; time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("%d SubmitTasks calls in 10s, want %d", calls("SubmitTasks"), tc.submits)
				}
			}
			var held, behalf bool
			if err := jm.do(ctx, func() {
				s := jm.slots["a"]
				held, behalf = s != nil, s != nil && s.behalf
			}); err != nil {
				t.Fatal(err)
			}
			if held != tc.held {
				t.Errorf("slot a held: %v, want %v", held, tc.held)
			}
			// Once the TaskExecutor took a deployment into the slot (as
			// the outcome or a state says) or offered it, the slot takes
			// SubmitTasks.
			if behalf {
				t.Error("slot a still waits for its TaskExecutor's offer")
			}
			if d, _, err := jm.Details(ctx, false, Page{}); err != nil || d.GetSummary().GetRestarts() != 0 {
				t.Errorf("details %v, %v; want no restart", d.GetSummary(), err)
			}
			if n := calls("SubmitTasks"); n != tc.submits {
				t.Errorf("%d SubmitTasks calls, want %d", n, tc.submits)
			}
		})
	}
}

// serveFakeTaskExecutor serves a fakeTaskExecutor that takes batch calls,
// until the test ends, and returns it and its URL.
func serveFakeTaskExecutor(t *testing.T) (*fakeTaskExecutor, string) {
	t.Helper()
	fake := &fakeTaskExecutor{batch: true, calls: map[string]int{}}
	mux := http.NewServeMux()
	mux.Handle(jobplanev1connect.NewTaskExecutorServiceHandler(fake))
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.Protocols = endpoint.ServerProtocols() // the JobMaster's client speaks h2c
	srv.Start()
	t.Cleanup(srv.Close)
	return fake, srv.URL
}

package taskexecutor_test

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	"github.com/jobplane/jobplane/gen/jobplane/cluster/v1/clusterv1connect"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/sdk/taskexecutor"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
)

// rmFenced runs a TaskExecutor of n slots on a store of its own, where
// `jobmanager` is granted to grant(1), and returns both.
func rmFenced(t *testing.T, n int) (*taskexecutor.Leaders, clusterv1connect.TaskExecutorServiceClient) {
	t.Helper()
	leaders := taskexecutor.NewLeaders(grant(1))
	te := serveTaskExecutor(t, taskexecutor.Config{Slots: n, Store: leaders, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	return leaders, te
}

// requestSlotUnder allocates the slot to job j under the ResourceManager
// token rm.
func requestSlotUnder(ctx context.Context, te clusterv1connect.TaskExecutorServiceClient, rm *jobplanev1.FencingToken, slot int32, alloc string) error {
	_, err := te.RequestSlot(ctx, &clusterv1.RequestSlotRequest{
		ResourceManagerToken: rm, SlotIndex: slot, AllocationId: alloc, JobId: "j",
		JobMasterAddress: "http://127.0.0.1:1", JobMasterToken: token(1),
	})
	return err
}

// probeUnder is TaskExecutorService.Heartbeat from the ResourceManager of
// token rm: its slot report, or its refusal.
func probeUnder(ctx context.Context, te clusterv1connect.TaskExecutorServiceClient, rm *jobplanev1.FencingToken) (*clusterv1.SlotReport, error) {
	resp, err := te.Heartbeat(ctx, &clusterv1.TaskExecutorServiceHeartbeatRequest{
		Sender: &clusterv1.TaskExecutorServiceHeartbeatRequest_ResourceManagerToken{ResourceManagerToken: rm},
	})
	return resp.GetSlotReport(), err
}

// staleNaming checks that err is ABORTED (STALE_FENCING_TOKEN) naming the
// grant want of `jobmanager` as the current token.
func staleNaming(t *testing.T, call string, err error, want election.Token) {
	t.Helper()
	staleIn(t, call, err, election.JobManager, want)
}

// staleIn checks that err is ABORTED (STALE_FENCING_TOKEN) naming the
// grant want of the election name as the current token.
func staleIn(t *testing.T, call string, err error, name string, want election.Token) {
	t.Helper()
	reason, md, _ := apierror.Info(err)
	if connect.CodeOf(err) != connect.CodeAborted || reason != jobplanev1.ErrorReason_ERROR_REASON_STALE_FENCING_TOKEN {
		t.Errorf("%s: %v, want ABORTED (STALE_FENCING_TOKEN)", call, err)
		return
	}
	if md["election"] != name || md["current_session_id"] != want.SessionID || md["current_epoch"] != strconv.FormatUint(want.Epoch, 10) {
		t.Errorf("%s: refusal names %v, want the current grant %v of %s", call, md, want, name)
	}
}

// A ResourceManager token newer than the grant that the store shows (an
// epoch never granted) is refused, whatever call carries it, and does not
// become the current token: the real ResourceManager keeps being served.
// Before contract 1.2 the TaskExecutor took any newer token, so a caller
// that made one up locked the ResourceManager out.
func TestForgedResourceManagerTokenRefused(t *testing.T) {
	t.Parallel()
	_, te := rmFenced(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := requestSlotUnder(ctx, te, token(1), 0, "real"); err != nil {
		t.Fatalf("RequestSlot under the granted token: %v", err)
	}
	forged := &jobplanev1.FencingToken{SessionId: "forger", Epoch: 1000}
	sameEpoch := &jobplanev1.FencingToken{SessionId: "forger", Epoch: 1}
	calls := map[string]func() error{
		"RequestSlot": func() error { return requestSlotUnder(ctx, te, forged, 1, "forged") },
		"RequestSlots": func() error {
			_, err := te.RequestSlots(ctx, &clusterv1.RequestSlotsRequest{ResourceManagerToken: forged, Slots: []*clusterv1.SlotRequest{{
				SlotIndex: 2, AllocationId: "forged-batch", JobId: "j", JobMasterAddress: "http://127.0.0.1:1", JobMasterToken: token(1),
			}}})
			return err
		},
		"Heartbeat": func() error { _, err := probeUnder(ctx, te, forged); return err },
		// Another session's token of the granted epoch was never granted.
		"RequestSlot (same epoch)": func() error { return requestSlotUnder(ctx, te, sameEpoch, 1, "forged-same") },
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	took := map[string]time.Duration{}
	for name, call := range calls {
		wg.Go(func() {
			began := time.Now()
			err := call()
			mu.Lock()
			defer mu.Unlock()
			took[name] = time.Since(began)
			staleNaming(t, name+" under a forged ResourceManager token", err, grant(1))
		})
	}
	wg.Wait()
	t.Logf("refusals took %v (grantWait bounds the forged epoch's)", took)

	if err := requestSlotUnder(ctx, te, token(1), 1, "real-after"); err != nil {
		t.Errorf("RequestSlot under the granted token after the forged ones: %v, want it allocated", err)
	}
	report, err := probeUnder(ctx, te, token(1))
	if err != nil {
		t.Fatalf("Heartbeat under the granted token after the forged ones: %v", err)
	}
	// Slot 0 may be free again: its allocation is offered to a JobMaster
	// address nobody serves, and freed once the offer's tries run out
	// (about as long as the forged epoch's refusals take).
	want := [][]string{{"real", ""}, {"real-after"}, {""}}
	for i, s := range report.GetSlots() {
		if !slices.Contains(want[i], s.GetAllocationId()) {
			t.Errorf("slot %d holds %q, want one of %q: a refused call allocates nothing", i, s.GetAllocationId(), want[i])
		}
	}
}

// A newer ResourceManager token that the store grants is taken, also
// when the call comes before the TaskExecutor observed the grant: it
// waits for the observation.
func TestNewerGrantedResourceManagerTokenTaken(t *testing.T) {
	t.Parallel()
	leaders, te := rmFenced(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := probeUnder(ctx, te, token(1)); err != nil {
		t.Fatalf("Heartbeat under the granted token: %v", err)
	}
	done := make(chan error, 1)
	began := time.Now()
	go func() { done <- requestSlotUnder(ctx, te, token(2), 0, "early") }()
	time.Sleep(100 * time.Millisecond) // the call waits for the grant meanwhile
	leaders.Grant(grant(2))
	if err := <-done; err != nil {
		t.Fatalf("RequestSlot under a token granted while it waited: %v, want it allocated", err)
	}
	t.Logf("the call waited %v, 100ms of it before the grant", time.Since(began))
	if _, err := probeUnder(ctx, te, token(1)); !apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_STALE_FENCING_TOKEN) {
		t.Errorf("Heartbeat under the older token after the newer was taken: %v, want STALE_FENCING_TOKEN", err)
	}
}

// The ResourceManager token the TaskExecutor observes in the store counts
// as seen: once a new leader is observed, a call of the deposed
// ResourceManager is refused before any call under the new token came.
func TestObservedResourceManagerTokenCountsAsSeen(t *testing.T) {
	t.Parallel()
	leaders, te := rmFenced(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := requestSlotUnder(ctx, te, token(1), 0, "before"); err != nil {
		t.Fatalf("RequestSlot under the granted token: %v", err)
	}
	leaders.Grant(grant(2))
	// The probe changes nothing; it is refused once the new leader is
	// observed, whenever that is.
	waitFor(t, "the deposed ResourceManager's Heartbeat refused STALE_FENCING_TOKEN after a new grant, none under it", func() bool {
		_, err := probeUnder(ctx, te, token(1))
		return apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_STALE_FENCING_TOKEN)
	})
	staleNaming(t, "RequestSlot of the deposed ResourceManager", requestSlotUnder(ctx, te, token(1), 1, "stale"), grant(2))
	report, err := probeUnder(ctx, te, token(2))
	if err != nil {
		t.Fatalf("Heartbeat under the new grant: %v", err)
	}
	if got := report.GetSlots()[1].GetAllocationId(); got != "" {
		t.Errorf("slot 1 holds %q, want it free: the stale call allocates nothing", got)
	}
}

// While the store cannot be observed, a newer ResourceManager token
// cannot be checked: the call is refused UNAVAILABLE (STORE_UNAVAILABLE)
// and changes nothing, while the current token is still served.
func TestResourceManagerTokenUncheckableWithoutTheStore(t *testing.T) {
	t.Parallel()
	leaders, te := rmFenced(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := probeUnder(ctx, te, token(1)); err != nil {
		t.Fatalf("Heartbeat under the granted token: %v", err)
	}
	leaders.Break()
	err := requestSlotUnder(ctx, te, token(2), 0, "unchecked")
	if connect.CodeOf(err) != connect.CodeUnavailable || !apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_STORE_UNAVAILABLE) {
		t.Errorf("RequestSlot under a newer token with the store unobservable: %v, want UNAVAILABLE (STORE_UNAVAILABLE)", err)
	}
	report, err := probeUnder(ctx, te, token(1))
	if err != nil {
		t.Fatalf("Heartbeat under the current token with the store unobservable: %v, want it served", err)
	}
	if got := report.GetSlots()[0].GetAllocationId(); got != "" {
		t.Errorf("slot 0 holds %q, want it free: the unchecked call allocates nothing", got)
	}
	leaders.Heal()
}

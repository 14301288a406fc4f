package taskexecutor_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"connectrpc.com/connect"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/sdk/taskexecutor"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
)

func token(epoch uint64) *jobplanev1.FencingToken {
	return &jobplanev1.FencingToken{SessionId: "s", Epoch: epoch}
}

// grant is token(epoch) as a grant of the store.
func grant(epoch uint64) election.Token {
	return election.Token{SessionID: "s", Epoch: epoch}
}

func TestFencing(t *testing.T) {
	// Run, so that the attempts left running are canceled at the end.
	leaders := taskexecutor.NewLeaders(grant(5))
	leaders.GrantJob("j", grant(11)) // the newer JobMaster below
	te := serveTaskExecutor(t, taskexecutor.Config{Slots: 2, Store: leaders, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx := context.Background()
	request := func(rm, jm uint64, slot int32, alloc string) error {
		_, err := te.RequestSlot(ctx, &clusterv1.RequestSlotRequest{
			ResourceManagerToken: token(rm), SlotIndex: slot, AllocationId: alloc, JobId: "j",
			JobMasterAddress: "http://127.0.0.1:1", JobMasterToken: token(jm),
		})
		return err
	}
	submit := func(jm uint64, alloc, vertex string) error {
		_, err := te.SubmitTask(ctx, &clusterv1.SubmitTaskRequest{
			JobId: "j", JobMasterToken: token(jm), AllocationId: alloc, HeartbeatTimeout: jmTimeout,
			Attempt: &jobplanev1.ExecutionAttemptId{VertexId: vertex}, Invokable: "sleep", Config: map[string]string{"duration": "1h"},
		})
		return err
	}
	if err := request(5, 10, 0, "a"); err != nil {
		t.Fatalf("RequestSlot: %v", err)
	}
	if err := request(5, 10, 0, "a"); err != nil {
		t.Errorf("repeated RequestSlot: %v", err)
	}
	if err := request(4, 10, 1, "b"); !apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_STALE_FENCING_TOKEN) {
		t.Errorf("RequestSlot with an older ResourceManager token: %v, want STALE", err)
	}
	if err := request(5, 10, 0, "other"); !apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_SLOT_OCCUPIED) {
		t.Errorf("RequestSlot of a taken slot: %v, want SLOT_OCCUPIED", err)
	}
	if err := submit(10, "nope", "v"); !apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_SLOT_NOT_ALLOCATED) || connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("SubmitTask into an unallocated slot: %v, want FAILED_PRECONDITION SLOT_NOT_ALLOCATED", err)
	}
	if err := submit(10, "a", "v"); err != nil {
		t.Fatalf("SubmitTask: %v", err)
	}
	if err := submit(10, "a", "v"); err != nil {
		t.Errorf("repeated SubmitTask: %v", err)
	}
	if err := submit(10, "a", "w"); !apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_SLOT_OCCUPIED) {
		t.Errorf("SubmitTask into a busy slot: %v, want SLOT_OCCUPIED", err)
	}
	if err := submit(9, "a", "v"); !apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_STALE_FENCING_TOKEN) {
		t.Errorf("SubmitTask with an older JobMaster token: %v, want STALE", err)
	}
	// A newer JobMaster takes over the job: the old attempts are canceled,
	// and the older token is refused from then on.
	if _, err := te.CancelTask(ctx, &clusterv1.CancelTaskRequest{JobId: "j", JobMasterToken: token(11), Attempt: &jobplanev1.ExecutionAttemptId{VertexId: "none"}}); err != nil {
		t.Fatalf("CancelTask with a newer token: %v", err)
	}
	if _, err := te.CancelTask(ctx, &clusterv1.CancelTaskRequest{JobId: "j", JobMasterToken: token(10), Attempt: &jobplanev1.ExecutionAttemptId{VertexId: "v"}}); !apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_STALE_FENCING_TOKEN) {
		t.Errorf("CancelTask with the old token: %v, want STALE", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		// The slot frees up for the new JobMaster once the old attempt ended.
		if err := submit(11, "a", "v2"); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the old JobMaster's attempt still holds the slot: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := te.SubmitTask(ctx, &clusterv1.SubmitTaskRequest{}); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("empty SubmitTask: %v, want INVALID_ARGUMENT", err)
	}
}

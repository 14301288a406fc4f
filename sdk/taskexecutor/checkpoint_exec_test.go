//go:build unix

package taskexecutor_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/taskexecutor"
)

// An exec task finds its restored state in its checkpoint directory, and
// its checkpoints take the state file it keeps there.
func TestExecCheckpointFiles(t *testing.T) {
	t.Parallel()
	client := serveTaskExecutor(t, taskexecutor.Config{Slots: 1, AllowExec: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx := context.Background()
	if _, err := client.RequestSlot(ctx, &clusterv1.RequestSlotRequest{
		ResourceManagerToken: token(1), AllocationId: "a", JobId: "j", JobMasterAddress: "http://127.0.0.1:1", JobMasterToken: token(1),
	}); err != nil {
		t.Fatalf("RequestSlot: %v", err)
	}
	script := `echo "restored from $JOBPLANE_RESTORED_FROM: $(cat "$JOBPLANE_CHECKPOINT_DIR/restored")"
n=$(( $(cat "$JOBPLANE_CHECKPOINT_DIR/restored") + 1 ))
printf '%s' "$n" > "$JOBPLANE_CHECKPOINT_DIR/state.tmp" && mv "$JOBPLANE_CHECKPOINT_DIR/state.tmp" "$JOBPLANE_CHECKPOINT_DIR/state"
echo wrote
sleep 60`
	if _, err := client.SubmitTask(ctx, &clusterv1.SubmitTaskRequest{
		JobId: "j", JobMasterToken: token(1), AllocationId: "a", HeartbeatTimeout: jmTimeout,
		Attempt: &jobplanev1.ExecutionAttemptId{VertexId: "x"}, Invokable: "exec", Config: execConfig(script),
		RestoredState: &jobplanev1.SubtaskState{VertexId: "x", State: &jobplanev1.SubtaskState_Inline{Inline: []byte("41")}}, RestoredFrom: "9",
	}); err != nil {
		t.Fatalf("SubmitTask: %v", err)
	}
	waitFor(t, "the command to write its state", func() bool {
		resp, err := client.GetTaskOutput(ctx, &clusterv1.GetTaskOutputRequest{JobId: "j", Attempt: &jobplanev1.ExecutionAttemptId{VertexId: "x"}})
		return err == nil && strings.Contains(string(resp.GetData()), "wrote")
	})
	out, err := client.GetTaskOutput(ctx, &clusterv1.GetTaskOutputRequest{JobId: "j", Attempt: &jobplanev1.ExecutionAttemptId{VertexId: "x"}})
	if err != nil || !strings.Contains(string(out.GetData()), "restored from 9: 41") {
		t.Fatalf("the command's output = %q, %v; want it to have read its restored state 41 from checkpoint 9", out.GetData(), err)
	}
	resp, err := client.TriggerCheckpoint(ctx, &clusterv1.TriggerCheckpointRequest{
		JobId: "j", JobMasterToken: token(1), CheckpointId: 10, Attempts: []*jobplanev1.ExecutionAttemptId{{VertexId: "x"}},
	})
	if err != nil || string(resp.GetAcks()[0].GetState().GetInline()) != "42" {
		t.Fatalf("checkpoint 10 = %v, %v; want the state file's 42", resp, err)
	}
	if _, err := client.CancelTask(ctx, &clusterv1.CancelTaskRequest{JobId: "j", JobMasterToken: token(1), Attempt: &jobplanev1.ExecutionAttemptId{VertexId: "x"}}); err != nil {
		t.Fatalf("CancelTask: %v", err)
	}
}

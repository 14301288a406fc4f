//go:build unix

package taskexecutor_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"

	"connectrpc.com/connect"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	"github.com/jobplane/jobplane/gen/jobplane/cluster/v1/clusterv1connect"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/taskexecutor"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
)

// deployOnce allocates slot to job "j" and deploys an attempt of vertex
// into it.
func deployOnce(ctx context.Context, t *testing.T, client clusterv1connect.TaskExecutorServiceClient, slot int32, vertex, invokable string, config map[string]string) {
	t.Helper()
	alloc := "alloc-" + vertex
	if _, err := client.RequestSlot(ctx, &clusterv1.RequestSlotRequest{
		ResourceManagerToken: token(1), SlotIndex: slot, AllocationId: alloc, JobId: "j",
		JobMasterAddress: "http://127.0.0.1:1", JobMasterToken: token(1),
	}); err != nil {
		t.Fatalf("RequestSlot: %v", err)
	}
	if _, err := client.SubmitTask(ctx, &clusterv1.SubmitTaskRequest{
		JobId: "j", JobMasterToken: token(1), AllocationId: alloc, HeartbeatTimeout: jmTimeout,
		Attempt: &jobplanev1.ExecutionAttemptId{VertexId: vertex}, Invokable: invokable, Config: config,
	}); err != nil {
		t.Fatalf("SubmitTask: %v", err)
	}
}

// endedOutput waits for the attempt of vertex to end, and returns all of
// its output that is kept.
func endedOutput(ctx context.Context, t *testing.T, client clusterv1connect.TaskExecutorServiceClient, vertex string) *clusterv1.GetTaskOutputResponse {
	t.Helper()
	var resp *clusterv1.GetTaskOutputResponse
	waitFor(t, "the attempt of "+vertex+" to end", func() bool {
		var err error
		resp, err = client.GetTaskOutput(ctx, &clusterv1.GetTaskOutputRequest{JobId: "j", Attempt: &jobplanev1.ExecutionAttemptId{VertexId: vertex}})
		if err != nil {
			t.Fatalf("GetTaskOutput: %v", err)
		}
		return resp.GetEnded()
	})
	return resp
}

func execConfig(script string) map[string]string {
	argv, _ := json.Marshal([]string{"sh", "-c", script})
	return map[string]string{"argv": string(argv)}
}

// An attempt's output is kept: its Logger's lines, and an exec command's
// stdout and stderr whether it succeeded or failed.
func TestGetTaskOutput(t *testing.T) {
	t.Parallel()
	client := serveTaskExecutor(t, taskexecutor.Config{
		Slots: 3, AllowExec: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Invokables: map[string]taskexecutor.Invokable{
			"log": func(_ context.Context, task taskexecutor.Task) error {
				task.Logger.Info("hello from the task", "subtask", task.SubtaskIndex)
				return nil
			},
		},
	})
	ctx := context.Background()
	deployOnce(ctx, t, client, 0, "logger", "log", nil)
	deployOnce(ctx, t, client, 1, "ok", "exec", execConfig("echo out-ok; echo err-ok >&2"))
	deployOnce(ctx, t, client, 2, "bad", "exec", execConfig("echo out-bad; echo err-bad >&2; exit 2"))

	got := endedOutput(ctx, t, client, "logger")
	if line := string(got.GetData()); !strings.Contains(line, `level=INFO msg="hello from the task" subtask=0`) || !strings.HasSuffix(line, "\n") {
		t.Errorf("logger output = %q, want the logged line", line)
	}
	if got.GetOffset() != 0 || got.GetNextOffset() != int64(len(got.GetData())) || got.GetEndOffset() != got.GetNextOffset() {
		t.Errorf("logger output at %d, next %d, end %d; want all of it from 0", got.GetOffset(), got.GetNextOffset(), got.GetEndOffset())
	}
	for vertex, want := range map[string]string{"ok": "out-ok\nerr-ok\n", "bad": "out-bad\nerr-bad\n"} {
		if got := endedOutput(ctx, t, client, vertex); string(got.GetData()) != want {
			t.Errorf("exec %s output = %q, want %q", vertex, got.GetData(), want)
		}
	}

	// Following from an offset, in small reads.
	resp, err := client.GetTaskOutput(ctx, &clusterv1.GetTaskOutputRequest{JobId: "j", Attempt: &jobplanev1.ExecutionAttemptId{VertexId: "ok"}, Offset: 4, MaxBytes: 3})
	if err != nil || string(resp.GetData()) != "ok\n" || resp.GetOffset() != 4 || resp.GetNextOffset() != 7 || resp.GetEndOffset() != 14 {
		t.Errorf("GetTaskOutput(offset 4, 3 bytes) = %v, %v; want \"ok\\n\" from 4 to 7 of 14", resp, err)
	}

	_, err = client.GetTaskOutput(ctx, &clusterv1.GetTaskOutputRequest{JobId: "j", Attempt: &jobplanev1.ExecutionAttemptId{VertexId: "ok", AttemptNumber: 1}})
	if !apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_EXECUTION_NOT_FOUND) || connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("GetTaskOutput of an attempt that never ran: %v, want NOT_FOUND EXECUTION_NOT_FOUND", err)
	}
	_, err = client.GetTaskOutput(ctx, &clusterv1.GetTaskOutputRequest{JobId: "j", Offset: -1})
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("GetTaskOutput without an attempt and a negative offset: %v, want INVALID_ARGUMENT", err)
	}
}

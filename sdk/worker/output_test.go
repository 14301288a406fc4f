package worker_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/internal/servertest"
	"github.com/jobplane/jobplane/sdk/worker"
)

// What a function logs with Task.Logger is the attempt's output, which
// clients read with GetTaskOutput.
func TestTaskLoggerWritesTheAttemptsOutput(t *testing.T) {
	c := servertest.Start(t)
	w := newWorker(t, worker.Config{Server: c.URL, Slots: 2})
	w.Register("chatty", func(ctx context.Context, task worker.Task) error {
		task.Logger.Info("hello from the function", "subtask", task.SubtaskIndex)
		return nil
	})
	start(t, w)
	c.WaitTaskExecutor(t, "chatty")

	c.Submit(t, "chatty", "chatty", 2, nil)
	if r := c.Result(t, "chatty"); r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("job ended %v (%v), want FINISHED", r.GetStatus(), r.GetFailure())
	}
	for _, index := range []int32{0, 1} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		resp, err := c.Dispatcher.GetTaskOutput(ctx, &jobplanev1.GetTaskOutputRequest{JobId: "chatty", VertexId: "v", SubtaskIndex: index})
		cancel()
		if err != nil {
			t.Fatalf("output of subtask %d: %v", index, err)
		}
		out := string(resp.GetData())
		if want := "hello from the function"; !strings.Contains(out, want) || !strings.Contains(out, fmt.Sprintf("subtask=%d", index)) {
			t.Errorf("output of subtask %d = %q, want a line %q with subtask=%d", index, out, want, index)
		}
	}
}

package worker_test

import (
	"context"
	"fmt"
	"os"
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

// What a function writes to Task.Output is the attempt's output too,
// beside its Logger's lines; what it prints to the process's standard
// output or error is not (a worker runs many tasks at once).
func TestTaskOutputIsTheAttemptsOutput(t *testing.T) {
	c := servertest.Start(t)
	w := newWorker(t, worker.Config{Server: c.URL})
	w.Register("printer", func(ctx context.Context, task worker.Task) error {
		task.Logger.Info("from the logger")
		fmt.Fprintf(task.Output, "from the output writer %d\n", task.SubtaskIndex)
		fmt.Fprintln(os.Stdout, "from the process's stdout")
		fmt.Fprintln(os.Stderr, "from the process's stderr")
		return nil
	})
	start(t, w)
	c.WaitTaskExecutor(t, "printer")
	c.Submit(t, "printer", "printer", 1, nil)
	if r := c.Result(t, "printer"); r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("job ended %v (%v), want FINISHED", r.GetStatus(), r.GetFailure())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := c.Dispatcher.GetTaskOutput(ctx, &jobplanev1.GetTaskOutputRequest{JobId: "printer", VertexId: "v"})
	if err != nil {
		t.Fatalf("GetTaskOutput: %v", err)
	}
	out := string(resp.GetData())
	for _, want := range []string{"msg=\"from the logger\"", "from the output writer 0\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("output = %q, want %q in it", out, want)
		}
	}
	if strings.Contains(out, "process's") {
		t.Errorf("output = %q, holds what went to the process's stdout or stderr", out)
	}
}

// A worker with an output directory, started again with it and its ID,
// serves the output of the attempts that ended before.
func TestWorkerOutputDirOutlivesTheWorker(t *testing.T) {
	c := servertest.Start(t)
	dir := t.TempDir()
	cfg := worker.Config{Server: c.URL, ID: "w-output", OutputDir: dir}
	w := newWorker(t, cfg)
	w.Register("printer", func(ctx context.Context, task worker.Task) error {
		fmt.Fprintln(task.Output, "printed by the first worker")
		return nil
	})
	first := start(t, w)
	c.WaitTaskExecutor(t, "printer")
	c.Submit(t, "kept", "printer", 1, nil)
	if r := c.Result(t, "kept"); r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("job ended %v (%v), want FINISHED", r.GetStatus(), r.GetFailure())
	}
	first.stop()
	if err := first.wait(t); err != nil {
		t.Fatalf("Run: %v", err)
	}

	w2 := newWorker(t, cfg)
	w2.Register("printer", func(ctx context.Context, task worker.Task) error { return nil })
	start(t, w2)
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := c.Dispatcher.GetTaskOutput(ctx, &jobplanev1.GetTaskOutputRequest{JobId: "kept", VertexId: "v"})
		cancel()
		if err == nil && string(resp.GetData()) == "printed by the first worker\n" && resp.GetEnded() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("output after the worker's restart = %v, %v; want the first worker's line", resp, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

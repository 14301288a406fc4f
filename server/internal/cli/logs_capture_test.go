package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jobplane/jobplane/sdk/worker"
)

// captureJob runs the worker's "capture" function and an exec command
// on one subtask each.
const captureJob = `name: capture
vertices:
  - id: go
    invokable: capture
    parallelism: 1
  - id: sh
    invokable: exec
    parallelism: 1
    config:
      argv: '["sh", "-c", "echo exec-stdout-marker; echo exec-stderr-marker >&2"]'
`

// jobplane logs -h says what is captured and what is not; each claim
// holds for a job that writes every way it names.
func TestLogsHelpSaysWhatIsCaptured(t *testing.T) {
	c := startCLICluster(t)
	w, err := worker.New(worker.Config{Server: c.url, AllowExec: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	w.Register("capture", func(ctx context.Context, task worker.Task) error {
		task.Logger.Info("logger-marker")
		fmt.Fprintln(task.Output, "output-marker")
		fmt.Fprintln(os.Stdout, "process-stdout-marker")
		fmt.Fprintln(os.Stderr, "process-stderr-marker")
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-ran:
		case <-time.After(30 * time.Second):
			t.Error("the worker did not stop within 30s")
		}
	})
	// The worker joins the standalone's two TaskExecutors.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		r := c.run(t, "cluster", "-o", "json")
		var out struct {
			TaskExecutors []any `json:"task_executors"`
		}
		if r.code == exitOK && json.Unmarshal([]byte(r.stdout), &out) == nil && len(out.TaskExecutors) == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the worker did not join within 30s: %+v", r)
		}
	}
	expect(t, "submit capture", c.run(t, "submit", "--id", "capture", writeJob(t, "capture.yaml", captureJob)), exitOK, nil, nil)
	goOut := c.run(t, "logs", "capture", "--vertex", "go", "--subtask", "0")
	shOut := c.run(t, "logs", "capture", "--vertex", "sh", "--subtask", "0")
	expect(t, "logs of the Go function", goOut, exitOK, nil, nil)
	expect(t, "logs of the exec command", shOut, exitOK, nil, nil)

	help := c.run(t, "logs", "-h")
	text := strings.Join(strings.Fields(help.stdout+help.stderr), " ")
	for _, claim := range []struct {
		phrase   string // in the help, its lines joined
		out      cliResult
		marker   string
		captured bool
	}{
		{"What is captured: an exec task's standard output and error", shOut, "exec-stdout-marker", true},
		{"What is captured: an exec task's standard output and error", shOut, "exec-stderr-marker", true},
		{"a Go function's Task.Logger lines", goOut, "msg=logger-marker", true},
		{"and what it writes to Task.Output.", goOut, "output-marker", true},
		{"Not captured: a Go worker process's own standard output and error (fmt.Printf, os.Stdout)", goOut, "process-stdout-marker", false},
		{"Not captured: a Go worker process's own standard output and error (fmt.Printf, os.Stdout)", goOut, "process-stderr-marker", false},
	} {
		if !strings.Contains(text, claim.phrase) {
			t.Errorf("jobplane logs -h does not say %q:\n%s", claim.phrase, help.stdout)
		}
		if got := strings.Contains(claim.out.stdout, claim.marker); got != claim.captured {
			t.Errorf("%q: %s in jobplane logs = %v, want %v:\n%s", claim.phrase, claim.marker, got, claim.captured, claim.out.stdout)
		}
	}
}

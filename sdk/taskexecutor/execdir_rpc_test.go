//go:build unix

package taskexecutor_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jobplane/jobplane/sdk/taskexecutor"
)

// A TaskExecutor given no exec directory runs each exec attempt in a
// directory under jobplane-exec-<id> in the OS temp directory, gone with
// the attempt, and removes that root when it stops.
func TestExecDefaultDirectory(t *testing.T) {
	id := "te-exec-dir-" + strings.ReplaceAll(t.Name(), "/", "_") + time.Now().Format("150405.000000000")
	root := filepath.Join(os.TempDir(), "jobplane-exec-"+id)
	t.Cleanup(func() { os.RemoveAll(root) })
	te, client := serveUnstarted(t, taskexecutor.Config{ID: id, Slots: 1, AllowExec: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = te.Run(runCtx); close(done) }()
	t.Cleanup(func() { stop(); <-done })

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	deployOnce(ctx, t, client, 0, "where", "exec", execConfig(`pwd -P`))
	out := endedOutput(ctx, t, client, "where")
	dir := strings.TrimSpace(string(out.GetData()))
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		t.Fatalf("the default root %s: %v", root, err)
	}
	if filepath.Dir(dir) != realRoot {
		t.Fatalf("the attempt ran in %q, want a directory under %s", dir, realRoot)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the attempt's directory outlived it: %v", err)
	}
	stop()
	<-done
	if _, err := os.Stat(root); !os.IsNotExist(err) {
		t.Errorf("the default root outlived the TaskExecutor: %v", err)
	}
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
)

// processGone reports whether pid has ended: no such process, or a zombie
// waiting for init to reap it (a zombie still answers kill(pid, 0)).
func processGone(pid int) bool {
	if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		s := string(stat) // the state follows the parenthesized command name
		if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
			return s[i+2] == 'Z' || s[i+2] == 'X'
		}
	}
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// SIGKILL of a standalone process alone, not of its process group, kills
// the processes of its running exec tasks too, grandchildren included: a
// task does not outlive its TaskExecutor to overlap the recovered run.
func TestStandaloneExecTasksDieWithIt(t *testing.T) {
	if testing.Short() {
		t.Skip("process kill")
	}
	p, client, tr := startStandalone(t, t.TempDir())
	defer tr.CloseIdleConnections()

	pidDir := t.TempDir()
	argv, _ := json.Marshal([]string{"sh", "-c", `echo $$ > "$DIR/shell"; sleep 300 & echo $! > "$DIR/child"; wait`})
	env, _ := json.Marshal(map[string]string{"DIR": pidDir})
	graph := &jobplanev1.JobGraph{Name: "long", Vertices: []*jobplanev1.JobVertex{{
		Id: "run", Invokable: "exec", Parallelism: 1, Config: map[string]string{"argv": string(argv), "env": string(env)},
	}}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := client.SubmitJob(ctx, &jobplanev1.SubmitJobRequest{JobId: "long", JobGraph: graph}); err != nil {
		t.Fatalf("submit: %v", err)
	}
	pids := map[string]int{}
	t.Cleanup(func() { // leave nothing running when the test fails
		for _, pid := range pids {
			if !processGone(pid) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	for _, name := range []string{"shell", "child"} {
		pid, err := strconv.Atoi(waitForFile(t, p, filepath.Join(pidDir, name)))
		if err != nil {
			t.Fatalf("pid file %s: %v", name, err)
		}
		pids[name] = pid
	}

	tr.CloseIdleConnections()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	p.wait(t, 20*time.Second)
	killed := time.Now()
	deadline := killed.Add(5 * time.Second)
	for {
		var alive []string
		for name, pid := range pids {
			if !processGone(pid) {
				alive = append(alive, fmt.Sprintf("%s (pid %d)", name, pid))
			}
		}
		if len(alive) == 0 {
			t.Logf("the task's processes were gone %v after the standalone was reaped", time.Since(killed).Round(time.Millisecond))
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still running 5s after the standalone died: %v", alive)
		}
		time.Sleep(10 * time.Millisecond) // polling /proc; bounded by the deadline
	}
}

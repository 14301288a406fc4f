//go:build unix

package taskexecutor

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
)

// shellTask is an exec task running script with sh, with DIR set to dir.
func shellTask(script, dir string) Task {
	argv, _ := json.Marshal([]string{"sh", "-c", script})
	env, _ := json.Marshal(map[string]string{"DIR": dir})
	return Task{JobID: "j", VertexID: "v", Config: map[string]string{"argv": string(argv), "env": string(env)}}
}

// runAsync runs inv in the background; the channel gets its result.
func runAsync(ctx context.Context, inv Invokable, task Task) <-chan error {
	done := make(chan error, 1)
	go func() { done <- inv(ctx, task) }()
	return done
}

// processGone reports whether pid has ended: there is no such process, or
// it is a zombie, dead and only waiting for its parent (init, here) to reap
// it; a zombie still answers kill(pid, 0), so /proc is asked first.
func processGone(pid int) bool {
	if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		// The state follows the command name in parentheses, which may
		// itself hold spaces and parentheses.
		s := string(stat)
		if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
			return s[i+2] == 'Z' || s[i+2] == 'X'
		}
	}
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// waitForPids waits, bounded, for each file in dir to hold a pid, and
// kills those processes when the test ends if they still run, so a failing
// test leaves nothing behind. It fails the test early if done yields first.
func waitForPids(t *testing.T, dir string, done <-chan error, names ...string) map[string]int {
	t.Helper()
	pids := map[string]int{}
	t.Cleanup(func() {
		for _, pid := range pids {
			if !processGone(pid) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for _, name := range names {
		for {
			b, err := os.ReadFile(filepath.Join(dir, name))
			if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && perr == nil {
				pids[name] = pid
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no pid in %s after 20s", name)
			}
			select {
			case err := <-done:
				t.Fatalf("the task ended before writing %s: %v", name, err)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	return pids
}

// waitGone polls, bounded by within, until every process in pids is gone,
// and fails the test naming those that are not.
func waitGone(t *testing.T, pids map[string]int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		var alive []string
		for name, pid := range pids {
			if !processGone(pid) {
				alive = append(alive, fmt.Sprintf("%s (pid %d)", name, pid))
			}
		}
		if len(alive) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still running %v after the task ended: %v", within, alive)
		}
		time.Sleep(10 * time.Millisecond) // polling /proc; bounded by the deadline
	}
}

// A canceled exec task gets SIGTERM on its whole process group, SIGKILL
// grace later, and leaves neither its shell nor the shell's child behind.
func TestExecCancelKillsTheProcessGroup(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		trap  string // prepended to the script
		grace time.Duration
		// The invokable returns within [minWait, maxWait] of the cancel.
		minWait, maxWait time.Duration
	}{
		// Only the SIGKILL after the grace ends these: the child inherits
		// the ignored SIGTERM.
		{"ignores SIGTERM", `trap "" TERM;`, 300 * time.Millisecond, 300 * time.Millisecond, 10 * time.Second},
		// SIGTERM reaches the shell and its child; nobody waits the grace.
		{"obeys SIGTERM", ``, time.Minute, 0, 20 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			script := tc.trap + ` echo $$ > "$DIR/shell"; sleep 30 & echo $! > "$DIR/child"; wait`
			done := runAsync(ctx, execInvokable(tc.grace, ExecConfig{}, 64<<10), shellTask(script, dir))
			pids := waitForPids(t, dir, done, "shell", "child")

			cancel()
			canceled := time.Now()
			select {
			case err := <-done:
				if waited := time.Since(canceled); waited < tc.minWait || waited > tc.maxWait {
					t.Errorf("returned %v after the cancel, want within [%v, %v]", waited, tc.minWait, tc.maxWait)
				}
				if !errors.Is(err, context.Canceled) {
					t.Errorf("err = %v, want context.Canceled", err)
				}
			case <-time.After(tc.maxWait):
				t.Fatalf("still running %v after the cancel", tc.maxWait)
			}
			waitGone(t, pids, 5*time.Second)
		})
	}
}

// However an exec task ends by itself, nothing it started in the
// background survives it, even a child that holds the output pipe.
func TestExecEndedTaskLeavesNoProcess(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		script  string
		wantErr string // "" for success
	}{
		{"finished, child detached from the output", `sleep 30 >/dev/null 2>&1 & echo $! > "$DIR/child"`, ""},
		{"finished, child holding the output", `sleep 30 & echo $! > "$DIR/child"`, ""},
		{"failed, child holding the output", `sleep 30 & echo $! > "$DIR/child"; echo bye; exit 3`, "exit status 3: bye"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			done := runAsync(context.Background(), execInvokable(DefaultCancelGrace, ExecConfig{}, 64<<10), shellTask(tc.script, dir))
			// The child's pid is written before the task can end.
			pids := waitForPids(t, dir, nil, "child")
			var err error
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatalf("the task did not return within 10s")
			}
			if (err == nil) != (tc.wantErr == "") || err != nil && !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("err = %v, want %q", err, tc.wantErr)
			}
			waitGone(t, pids, 5*time.Second)
		})
	}
}

// The failure message still names the command, how it ended and the tail
// of its output, and the command gets the task's environment.
func TestExecResult(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		argv    []string
		env     map[string]string
		wantErr []string // substrings of the error; none for success
	}{
		{"success", []string{"true"}, nil, nil},
		{"exit code and output", []string{"sh", "-c", "echo to-stdout; echo to-stderr >&2; exit 3"}, nil,
			[]string{"sh: exit status 3: to-stdout\nto-stderr"}},
		{"signal", []string{"sh", "-c", "kill -KILL $$"}, nil, []string{"sh: signal: killed"}},
		{"environment", []string{"sh", "-c", `echo "$GREETING"; exit 1`}, map[string]string{"GREETING": "hello"},
			[]string{"exit status 1: hello"}},
		{"no shim variable in the command's environment", []string{"sh", "-c", `echo "shim=${JOBPLANE_EXEC_SHIM-unset}"; exit 1`}, nil,
			[]string{"shim=unset"}},
		{"command not found", []string{"jobplane-no-such-command"}, nil,
			[]string{"jobplane-no-such-command", "executable file not found"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			argv, _ := json.Marshal(tc.argv)
			env, _ := json.Marshal(tc.env)
			task := Task{Config: map[string]string{"argv": string(argv), "env": string(env)}}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err := execInvokable(DefaultCancelGrace, ExecConfig{}, 64<<10)(ctx, task)
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Errorf("err = %v, want nil", err)
				}
				return
			}
			for _, want := range tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("err = %v, want it to contain %q", err, want)
				}
			}
		})
	}
}

package taskexecutor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain stops a test binary started as a shim whose init did not take
// over (the shim is broken): run as a test binary again it would rerun the
// tests that start shims, without end. Otherwise it runs the tests and
// then fails if a goroutine outlived them (a task, an offer or a report
// sender that Run did not wait for).
func TestMain(m *testing.M) {
	if os.Getenv(shimEnv) != "" {
		fmt.Fprintln(os.Stderr, "started as an exec shim, but the shim's init did not run")
		os.Exit(3)
	}
	goleak.VerifyTestMain(m)
}

// helperDirEnv makes TestExecHelperProcess run an exec task that writes
// its pids into the directory the variable names, and block.
const helperDirEnv = "TASKEXECUTOR_TEST_EXEC_HELPER_DIR"

// TestExecHelperProcess is not a test: it is the process whose death
// TestExecTasksDieWithTheirProcess checks the task survives not.
func TestExecHelperProcess(t *testing.T) {
	dir := os.Getenv(helperDirEnv)
	if dir == "" {
		return
	}
	task := shellTask(`echo $$ > "$DIR/shell"; sleep 30 & echo $! > "$DIR/child"; wait`, dir)
	err := execInvokable(DefaultCancelGrace, ExecConfig{}, 64<<10)(context.Background(), task)
	t.Fatalf("the task ended while it should have been killed with this process: %v", err)
}

// SIGKILL of the process running an exec task (not of its process group)
// kills the task's shell and the shell's child too.
func TestExecTasksDieWithTheirProcess(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	helper := exec.Command(os.Args[0], "-test.run=^TestExecHelperProcess$")
	helper.Env = append(os.Environ(), helperDirEnv+"="+dir)
	var out bytes.Buffer
	helper.Stdout, helper.Stderr = &out, &out
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- helper.Wait() }()
	t.Cleanup(func() {
		_ = helper.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("helper output:\n%s", &out)
		}
	})
	pids := waitForPids(t, dir, done, "shell", "child")

	if err := helper.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
		done <- nil // for the cleanup
	case <-time.After(10 * time.Second):
		t.Fatal("the helper did not die of SIGKILL within 10s")
	}
	waitGone(t, pids, 5*time.Second)
}

// startShim starts the shim by hand for the command argv, as wrap says,
// and returns its exit and what it reported on the status pipe.
func startShim(t *testing.T, parent int, argv []string, wrap func(*exec.Cmd)) (*os.ProcessState, string) {
	t.Helper()
	statusR, statusW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer statusR.Close()
	path, err := exec.LookPath(argv[0])
	if err != nil {
		t.Fatal(err)
	}
	shim := exec.Command(os.Args[0], append([]string{path}, argv...)...)
	shim.Args[0] = shimArg0
	shim.Env = append(os.Environ(), shimEnv+"="+strconv.Itoa(parent))
	shim.ExtraFiles = []*os.File{statusW}
	var stderr bytes.Buffer
	shim.Stderr = &stderr
	shim.WaitDelay = 5 * time.Second // should a leftover hold stderr
	shim.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if wrap != nil {
		wrap(shim)
	}
	err = shim.Start()
	statusW.Close()
	if err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(20*time.Second, func() { _ = shim.Process.Kill() })
	defer timer.Stop()
	if err := shim.Wait(); err != nil && !errors.As(err, new(*exec.ExitError)) {
		t.Fatal(err)
	}
	status, _ := io.ReadAll(statusR)
	t.Logf("shim stderr: %s", &stderr)
	return shim.ProcessState, string(status)
}

// A shim whose TaskExecutor died before the shim could watch it kills its
// group at once and never starts the command.
func TestExecShimWhoseParentIsGoneStartsNothing(t *testing.T) {
	t.Parallel()
	// A TaskExecutor that is gone: a process that ran and was reaped.
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	started := filepath.Join(dir, "started")
	ps, status := startShim(t, gone.Process.Pid, []string{"sh", "-c", `echo $$ > "$0"; sleep 30`, started}, nil)
	if ws := ps.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Errorf("shim ended with %v, want killed by its own group SIGKILL", ps)
	}
	if status != "" {
		t.Errorf("status = %q, want none", status)
	}
	if _, err := os.Stat(started); !os.IsNotExist(err) {
		t.Errorf("the command started (stat %s: %v)", started, err)
	}
}

// A shim that does not lead its own process group (the variable leaked
// into some other process) refuses to run, rather than kill its caller's
// group.
func TestExecShimRefusesToRunOutsideItsOwnGroup(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ran := filepath.Join(dir, "ran")
	ps, status := startShim(t, os.Getpid(), []string{"sh", "-c", `echo ran > "$0"`, ran}, func(c *exec.Cmd) {
		// A shell leads the group and runs the shim as its child: were the
		// guard broken, the shim would kill that shell, not the test.
		c.Args = append([]string{"sh", "-c", `"$0" "$@"; exit $(($? + 100))`, c.Path}, c.Args[1:]...)
		c.Path = "/bin/sh"
	})
	if ps.ExitCode() != 127+100 {
		t.Errorf("shell ended with %v, want exit status 227 (the shim's 127 + 100)", ps)
	}
	if status != "" {
		t.Errorf("status = %q, want none", status)
	}
	if _, err := os.Stat(ran); !os.IsNotExist(err) {
		t.Errorf("the command ran (stat %s: %v)", ran, err)
	}
}

package localcluster_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jobplane/jobplane/server/localcluster"
)

// childEnv makes the test binary the child program of the Process tests,
// in the mode it names.
const childEnv = "LOCALCLUSTER_TEST_CHILD"

// child is the test binary run as a Process: in mode "serve" it writes
// the file "ready" into its working directory and waits for SIGTERM,
// after which it says "terminated" and exits 0; in "stubborn" it ignores
// SIGTERM; in "exit" it fails at once; in "parent" it starts itself again
// in mode "serve" in the directory "grandchild", and waits for it.
func child(mode string) int {
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	switch mode {
	case "exit":
		fmt.Println("failing at once")
		return 3
	case "parent":
		if err := os.Mkdir("grandchild", 0o755); err != nil {
			fmt.Println(err)
			return 1
		}
		p, err := os.StartProcess(os.Args[0], os.Args[:1], &os.ProcAttr{
			Dir: "grandchild", Env: childEnviron("serve"), Files: []*os.File{nil, os.Stdout, os.Stderr},
		})
		if err != nil {
			fmt.Println(err)
			return 1
		}
		_, _ = p.Wait()
		return 0
	}
	fmt.Println("serving, pid", os.Getpid())
	if err := os.WriteFile("ready", []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		fmt.Println(err)
		return 1
	}
	for range term {
		if mode != "stubborn" {
			fmt.Println("terminated")
			return 0
		}
	}
	return 0
}

// childEnviron is this process's environment with the child's mode.
func childEnviron(mode string) []string {
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, childEnv+"=") })
	return append(env, childEnv+"="+mode)
}

// childCommand is a Command that runs the test binary in mode, ready once
// the file ready (in its directory, or in dir/sub) holds a pid.
func childCommand(t *testing.T, mode, readyIn string) localcluster.Command {
	dir := t.TempDir()
	ready := filepath.Join(dir, readyIn, "ready")
	return localcluster.Command{
		Name: "child-" + mode, Dir: dir, Path: os.Args[0], Env: childEnviron(mode),
		// A new run writes the file anew.
		Args: func() []string { os.Remove(ready); return nil },
		Ready: func(ctx context.Context, p *localcluster.Process) error {
			return p.Poll(ctx, 5*time.Millisecond, func(context.Context) error {
				if b, err := os.ReadFile(ready); err != nil || len(b) == 0 {
					return errors.New("not ready")
				}
				return nil
			})
		},
	}
}

func within(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// A Process is signalled, terminated, restarted and killed, and keeps
// the record and the log of its runs.
func TestProcess(t *testing.T) {
	p, err := localcluster.StartProcess(within(t, 30*time.Second), childCommand(t, "serve", ""))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	first := p.PID()
	if !p.Running() || first == 0 {
		t.Fatalf("running %v, pid %d; want a running process", p.Running(), first)
	}
	if err := p.Signal(syscall.SIGSTOP); err != nil || p.Running() {
		t.Errorf("after SIGSTOP: %v, running %v; want stopped", err, p.Running())
	}
	if err := p.Signal(syscall.SIGCONT); err != nil || !p.Running() {
		t.Errorf("after SIGCONT: %v, running %v; want running", err, p.Running())
	}
	if !p.Terminate(30 * time.Second) {
		t.Fatalf("the process did not exit on SIGTERM:\n%s", p.Log())
	}
	if err := p.Signal(syscall.SIGTERM); err == nil {
		t.Error("Signal of an exited process: nil, want an error")
	}

	if err := p.Restart(within(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	if p.PID() == first || !p.Running() {
		t.Errorf("restarted as pid %d (first %d), running %v; want a new running process", p.PID(), first, p.Running())
	}
	if err := p.Restart(within(t, 30*time.Second)); err == nil {
		t.Error("Restart of a running process: nil, want an error")
	}
	p.Kill()
	if err := p.Wait(within(t, time.Second)); err != nil {
		t.Fatal(err)
	}
	runs := p.Runs()
	if len(runs) != 2 {
		t.Fatalf("%d runs, want 2", len(runs))
	}
	if st := runs[0].State; st == nil || !st.Success() || runs[0].Exit.Before(runs[0].Start) {
		t.Errorf("first run %+v, want a clean exit after its start", runs[0])
	}
	if st := runs[1].State; st == nil || st.Success() || runs[1].Exit.IsZero() {
		t.Errorf("second run %+v, want killed", runs[1])
	}
	if log := p.Log(); strings.Count(log, "serving") != 2 || strings.Count(log, "terminated") != 1 {
		t.Errorf("log has %d starts and %d terminations, want 2 and 1:\n%s", strings.Count(log, "serving"), strings.Count(log, "terminated"), log)
	}
}

// Terminate kills a process that outlives its grace.
func TestProcessTerminateKills(t *testing.T) {
	p, err := localcluster.StartProcess(within(t, 30*time.Second), childCommand(t, "stubborn", ""))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	if p.Terminate(100 * time.Millisecond) {
		t.Error("Terminate reports a graceful exit of a process that ignores SIGTERM")
	}
	select {
	case <-p.Exited():
	default:
		t.Error("the process still runs after Terminate")
	}
}

// A process that exits before it is ready fails its start with
// ErrExited, and its log is in the error.
func TestProcessExitsBeforeReady(t *testing.T) {
	_, err := localcluster.StartProcess(within(t, 30*time.Second), childCommand(t, "exit", ""))
	if !errors.Is(err, localcluster.ErrExited) || !strings.Contains(err.Error(), "failing at once") {
		t.Errorf("StartProcess: %v; want ErrExited with the process's log", err)
	}
}

// With Command.Group, Kill reaches the process's children too.
func TestProcessGroup(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc to tell whether the grandchild lives")
	}
	cmd := childCommand(t, "parent", "grandchild")
	cmd.Group = true
	p, err := localcluster.StartProcess(within(t, 30*time.Second), cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	b, err := os.ReadFile(filepath.Join(p.Dir, "grandchild", "ready"))
	if err != nil {
		t.Fatal(err)
	}
	grandchild, err := strconv.Atoi(string(b))
	if err != nil {
		t.Fatal(err)
	}
	p.Kill()
	// The grandchild, reparented, is reaped by whoever adopts it: until
	// then it is a zombie (state Z), which counts as gone.
	deadline := time.Now().Add(30 * time.Second)
	for {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", grandchild))
		if err != nil || strings.Contains(string(stat), ") Z ") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the grandchild %d lives on after Kill: %s", grandchild, stat)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A relative program path is the caller's, not the process directory's.
func TestProcessRelativePath(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(wd, os.Args[0])
	if err != nil || !strings.ContainsRune(rel, filepath.Separator) {
		t.Skipf("no relative path with a directory to the test binary (%q, %v)", rel, err)
	}
	cmd := childCommand(t, "serve", "")
	cmd.Path = rel
	p, err := localcluster.StartProcess(within(t, 30*time.Second), cmd)
	if err != nil {
		t.Fatal(err)
	}
	p.Kill()
}

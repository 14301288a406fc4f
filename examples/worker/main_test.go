package main_test

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/server/localcluster"
)

func TestMain(m *testing.M) {
	os.Exit(localcluster.Main(m))
}

// workerProcess is the example program, running against a cluster.
type workerProcess struct {
	cmd    *exec.Cmd
	stdout *localcluster.Buffer
	stderr *localcluster.Buffer
	done   chan error
}

// startWorker builds the example (once) and runs it against c until the
// test ends, when it is killed if still running.
func startWorker(t *testing.T, c *localcluster.Standalone) *workerProcess {
	t.Helper()
	bin := localcluster.Build(t, "github.com/jobplane/jobplane/examples/worker", "worker")
	p := &workerProcess{
		cmd:    exec.Command(bin),
		stdout: new(localcluster.Buffer), stderr: new(localcluster.Buffer),
		done: make(chan error, 1),
	}
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	p.cmd.Env = append(os.Environ(), "JOBPLANE_SERVER="+c.URL())
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		err := <-p.done
		p.done <- err
		if t.Failed() {
			t.Logf("worker stdout:\n%s\nworker stderr:\n%s", p.stdout, p.stderr)
		}
	})
	c.WaitTaskExecutor(t, "greet")
	return p
}

// waitLines waits until the worker printed every line in want (in any
// order, among others), and fails the test after 30s.
func (p *workerProcess) waitLines(t *testing.T, want ...string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		lines := strings.Split(p.stdout.String(), "\n")
		missing := slices.DeleteFunc(slices.Clone(want), func(w string) bool { return slices.Contains(lines, w) })
		if len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the worker did not print %q within 30s", missing)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestExampleWorkerRunsSubtasks(t *testing.T) {
	c := localcluster.NewStandalone(t)
	p := startWorker(t, c)

	c.Submit(t, "greetings", "greet", 3, map[string]string{"name": "jobplane"})
	if r := c.Result(t, "greetings"); r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("job ended %v (%v), want FINISHED", r.GetStatus(), r.GetFailure())
	}
	p.waitLines(t, "hello jobplane from subtask 0 of 3", "hello jobplane from subtask 1 of 3", "hello jobplane from subtask 2 of 3")
	if n := strings.Count(p.stdout.String(), "hello jobplane"); n != 3 {
		t.Errorf("the worker greeted %d times, want 3 (once per subtask):\n%s", n, p.stdout)
	}

	// SIGTERM stops the worker cleanly.
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.done:
		p.done <- err
		if err != nil {
			t.Errorf("the worker exited with %v after SIGTERM, want status 0", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the worker did not exit within 30s of SIGTERM")
	}
}

func TestExampleWorkerSubtasksCanceledWithJob(t *testing.T) {
	c := localcluster.NewStandalone(t)
	p := startWorker(t, c)

	c.Submit(t, "lingering", "greet", 2, map[string]string{"name": "canceler", "linger": "1h"})
	p.waitLines(t, "hello canceler from subtask 0 of 2", "hello canceler from subtask 1 of 2")
	c.Cancel(t, "lingering")
	p.waitLines(t, "subtask 0 canceled", "subtask 1 canceled")
	if r := c.Result(t, "lingering"); r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_CANCELED {
		t.Errorf("job ended %v, want CANCELED", r.GetStatus())
	}
}

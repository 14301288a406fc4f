package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
	"github.com/jobplane/jobplane/server/localcluster/freeport"
)

// runClient runs `jobplane args...` (a client verb) to its end and
// returns its stdout, stderr and exit code.
func runClient(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = exit.ExitCode()
	default:
		t.Fatalf("jobplane %v: %v", args, err)
	}
	return out.String(), errOut.String(), code
}

// A standalone keeps its tasks' output under its data directory: killed
// with SIGKILL after a job ended and started again on the directory, it
// serves that output (GetTaskOutput, jobplane logs), found through the
// placements kept with the job's result and read from the TaskExecutor
// that kept its id.
func TestStandaloneServesOutputAfterSIGKILL(t *testing.T) {
	dir := t.TempDir()
	p, client, tr := startStandalone(t, dir)
	argv, _ := json.Marshal([]string{"sh", "-c", "echo printed before the kill; echo to stderr >&2"})
	g := &jobplanev1.JobGraph{Vertices: []*jobplanev1.JobVertex{{Id: "say", Invokable: "exec", Parallelism: 1, Config: map[string]string{"argv": string(argv)}}}}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := client.SubmitJob(ctx, &jobplanev1.SubmitJobRequest{JobId: "printer", JobGraph: g}); err != nil {
		t.Fatalf("SubmitJob: %v", err)
	}
	res, err := client.GetJobResult(ctx, &jobplanev1.GetJobResultRequest{JobId: "printer", Wait: true})
	if err != nil || res.GetResult().GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("GetJobResult = %v, %v; want FINISHED", res, err)
	}
	const want = "printed before the kill\nto stderr\n"
	before, err := client.GetTaskOutput(ctx, &jobplanev1.GetTaskOutputRequest{JobId: "printer", VertexId: "say"})
	if err != nil || string(before.GetData()) != want {
		t.Fatalf("output before the kill = %v, %v; want %q", before, err, want)
	}
	tr.CloseIdleConnections()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	p.wait(t, 20*time.Second)

	p, client, tr = startStandalone(t, dir)
	defer tr.CloseIdleConnections()
	after := readOutput(ctx, t, client, &jobplanev1.GetTaskOutputRequest{JobId: "printer", VertexId: "say"})
	if string(after.GetData()) != want || !after.GetEnded() || after.GetTaskExecutorId() != before.GetTaskExecutorId() || after.GetAttemptNumber() != 0 {
		t.Errorf("output after the restart = %q (ended %v, TaskExecutor %s, attempt %d); want %q, ended, on %s, attempt 0",
			after.GetData(), after.GetEnded(), after.GetTaskExecutorId(), after.GetAttemptNumber(), want, before.GetTaskExecutorId())
	}

	// jobplane logs, as a user runs it: the latest attempt, without
	// naming it.
	ov, err := client.GetClusterOverview(ctx, &jobplanev1.GetClusterOverviewRequest{})
	if err != nil {
		t.Fatalf("GetClusterOverview: %v", err)
	}
	stdout, stderr, code := runClient(t, "logs", "printer", "--vertex", "say", "--subtask", "0", "--server", ov.GetLeader().GetAddress())
	if code != 0 || stdout != want {
		t.Errorf("jobplane logs after the restart: exit %d, stdout %q, stderr %q; want %q", code, stdout, stderr, want)
	}
	// Without --vertex: the subtasks the result says ran.
	stdout, stderr, code = runClient(t, "logs", "printer", "--server", ov.GetLeader().GetAddress())
	if code != 0 || stdout != want {
		t.Errorf("jobplane logs printer after the restart: exit %d, stdout %q, stderr %q; want %q", code, stdout, stderr, want)
	}
	// What the data directory holds: the output, in a directory of the
	// TaskExecutor's own.
	if m, _ := filepath.Glob(filepath.Join(dir, "output", "te-*", "*.out")); len(m) != 1 {
		t.Errorf("output files under the data directory: %v, want the attempt's one", m)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	p.wait(t, 20*time.Second)
}

// readOutput reads an output through the Dispatcher, asking again while
// it is not found (a TaskExecutor that has not registered again yet) or
// the server does not lead yet, for at most 30 seconds.
func readOutput(ctx context.Context, t *testing.T, client jobplanev1connect.DispatcherServiceClient, req *jobplanev1.GetTaskOutputRequest) *jobplanev1.GetTaskOutputResponse {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := client.GetTaskOutput(ctx, req)
		if err == nil {
			return resp
		}
		if time.Now().After(deadline) {
			t.Fatalf("GetTaskOutput(%v) after the restart: %v", req, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A `jobplane taskexecutor` gets a new id at each start: restarted with
// its --output-dir on its --listen address, it serves the output of the
// attempts that ended before, which the Dispatcher reads at the address
// recorded with the attempt once the old id is no longer registered.
func TestTaskExecutorServesOutputAtItsAddressAfterSIGKILL(t *testing.T) {
	addrFile := filepath.Join(t.TempDir(), "addr")
	jm := startJobplane(t, "standalone", "--listen", "127.0.0.1:0", "--listen-addr-file", addrFile, "--data-dir", t.TempDir(),
		"--task-executors", "0", "--session-ttl", "2s", "--heartbeat-interval", "200ms", "--heartbeat-timeout", "1s")
	url := "http://" + waitForFile(t, jm, addrFile)
	listen, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	outDir := t.TempDir()
	teArgs := []string{"taskexecutor", "--hastore", url, "--listen", listen, "--allow-exec", "--output-dir", outDir}
	te := startJobplane(t, teArgs...)

	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := jobplanev1connect.NewDispatcherServiceClient(&http.Client{Transport: tr}, url)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	executors := func() []string {
		var ids []string
		resp, err := client.ListTaskExecutors(ctx, &jobplanev1.ListTaskExecutorsRequest{})
		if err != nil {
			return nil
		}
		for _, te := range resp.GetTaskExecutors() {
			ids = append(ids, te.GetTaskExecutorId())
		}
		return ids
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			if ctx.Err() != nil {
				t.Fatalf("%s: not within 90s", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	var first []string
	waitFor("the TaskExecutor registers", func() bool { first = executors(); return len(first) == 1 })

	argv, _ := json.Marshal([]string{"sh", "-c", "echo kept by a taskexecutor"})
	g := &jobplanev1.JobGraph{Vertices: []*jobplanev1.JobVertex{{Id: "say", Invokable: "exec", Parallelism: 1, Config: map[string]string{"argv": string(argv)}}}}
	if _, err := client.SubmitJob(ctx, &jobplanev1.SubmitJobRequest{JobId: "kept", JobGraph: g}); err != nil {
		t.Fatalf("SubmitJob: %v", err)
	}
	if res, err := client.GetJobResult(ctx, &jobplanev1.GetJobResultRequest{JobId: "kept", Wait: true}); err != nil || res.GetResult().GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("GetJobResult = %v, %v; want FINISHED", res, err)
	}
	te.cmd.Process.Signal(syscall.SIGKILL)
	te.wait(t, 20*time.Second)
	startJobplane(t, teArgs...)
	// The old id is dropped (heartbeat timeout) and the new one registers.
	waitFor("the old TaskExecutor is dropped and a new one registers", func() bool {
		ids := executors()
		return len(ids) == 1 && ids[0] != first[0]
	})
	resp := readOutput(ctx, t, client, &jobplanev1.GetTaskOutputRequest{JobId: "kept", VertexId: "say"})
	if string(resp.GetData()) != "kept by a taskexecutor\n" || resp.GetTaskExecutorId() != first[0] {
		t.Errorf("output after the restart = %q from %s; want the attempt's line, from %s", resp.GetData(), resp.GetTaskExecutorId(), first[0])
	}
}

// Output bounds that make no sense are refused before anything starts.
func TestOutputFlagsRefused(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"taskexecutor", "--output-max-bytes", "0"}, "-output-max-bytes must be positive"},
		{[]string{"standalone", "--output-max-age", "-1s"}, "-output-max-age must be positive"},
	} {
		var stdout, stderr bytes.Buffer
		if got := jobplaneMain(tc.args, &stdout, &stderr); got != exitUsage || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%v: exit code %d, stderr %q; want %d and %q", tc.args, got, stderr.String(), exitUsage, tc.want)
		}
	}
}

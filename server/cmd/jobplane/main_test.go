package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/hastore/hastorerpc"
)

// The test binary doubles as the jobplane binary: with this variable set it
// runs main with the remaining arguments, so process-level tests exercise
// the real command without building it separately.
const runMainEnv = "JOBPLANE_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

// process is a jobplane child process.
type process struct {
	cmd    *exec.Cmd
	stderr *bytes.Buffer
	done   chan error
}

// startJobplane starts `jobplane args...` as a child process and kills it,
// if still running, when the test ends.
func startJobplane(t *testing.T, args ...string) *process {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	// TMPDIR: what a killed child leaves in its temp directory (exec
	// tasks' directories) goes with the test.
	cmd.Env = append(os.Environ(), runMainEnv+"=1", "TMPDIR="+t.TempDir())
	p := &process{cmd: cmd, stderr: new(bytes.Buffer), done: make(chan error, 1)}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start jobplane: %v", err)
	}
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("jobplane stderr:\n%s", p.stderr)
		}
	})
	return p
}

// wait returns the child's exit code, failing the test if it does not exit
// within the deadline.
func (p *process) wait(t *testing.T, within time.Duration) int {
	t.Helper()
	select {
	case err := <-p.done:
		p.done <- err // keep it for the cleanup
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return exit.ExitCode()
		}
		if err != nil {
			t.Fatalf("wait: %v", err)
		}
		return 0
	case <-time.After(within):
		t.Fatalf("jobplane did not exit within %v", within)
		return -1
	}
}

// waitForFile polls for a non-empty file written by the child, bounded by a
// deadline, and returns its trimmed content.
func waitForFile(t *testing.T, p *process, name string) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(name); err == nil && len(b) > 0 {
			return strings.TrimSpace(string(b))
		}
		select {
		case err := <-p.done:
			p.done <- err
			t.Fatalf("jobplane exited before listening: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Fatalf("no address in %s after 20s", name)
	return ""
}

func TestStandaloneServesHealthAndStopsOnSIGTERM(t *testing.T) {
	addrFile := filepath.Join(t.TempDir(), "addr")
	p := startJobplane(t, "standalone", "--listen", "127.0.0.1:0", "--listen-addr-file", addrFile, "--data-dir", t.TempDir())
	url := "http://" + waitForFile(t, p, addrFile)

	var h2c http.Protocols
	h2c.SetUnencryptedHTTP2(true)
	h2cTransport := &http.Transport{Protocols: &h2c}
	h1Transport := &http.Transport{}
	defer h2cTransport.CloseIdleConnections()
	defer h1Transport.CloseIdleConnections()

	for _, tc := range []struct {
		name   string
		client *http.Client
		opts   []connect.ClientOption
	}{
		{"connect/http1.1", &http.Client{Transport: h1Transport}, nil},
		{"connect/h2c", &http.Client{Transport: h2cTransport}, nil},
		{"grpc/h2c", &http.Client{Transport: h2cTransport}, []connect.ClientOption{connect.WithGRPC()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			resp, err := grpchealth.NewClient(tc.client, url, tc.opts...).Check(ctx, &grpchealth.CheckRequest{})
			if err != nil {
				t.Fatalf("Check: %v", err)
			}
			if resp.Status != grpchealth.StatusServing {
				t.Errorf("status = %v, want SERVING", resp.Status)
			}
		})
	}

	// An idle HTTP/2 connection holds a graceful shutdown up to a second,
	// waiting for the client to act on GOAWAY; close ours first.
	h1Transport.CloseIdleConnections()
	h2cTransport.CloseIdleConnections()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 20*time.Second); code != exitOK {
		t.Errorf("exit code after SIGTERM = %d, want %d", code, exitOK)
	}
	if !strings.Contains(p.stderr.String(), "shut down") {
		t.Errorf("stderr lacks the shutdown line:\n%s", p.stderr)
	}
}

func TestHAStoreServesTheStoreDurably(t *testing.T) {
	dir := t.TempDir()
	addrFile := filepath.Join(t.TempDir(), "addr")
	p := startJobplane(t, "hastore", "--listen", "127.0.0.1:0", "--listen-addr-file", addrFile, "--data-dir", dir)
	url := "http://" + waitForFile(t, p, addrFile)

	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	store := hastorerpc.NewClient(hastorerpc.ClientConfig{HTTPClient: &http.Client{Transport: tr}, BaseURL: url})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sess, err := store.OpenSession(ctx, hastore.SessionConfig{TTL: 5 * time.Second})
	if err != nil {
		t.Fatalf("OpenSession: %v", err)
	}
	l, err := sess.Campaign(ctx, election.JobManager, "http://127.0.0.1:1")
	if err != nil {
		t.Fatalf("Campaign: %v", err)
	}
	plan := &hastorev1.ExecutionPlan{JobId: "durable", JobGraph: &jobplanev1.JobGraph{Name: "durable"}}
	if err := store.PutExecutionPlan(ctx, l.Fence(), plan); err != nil {
		t.Fatalf("PutExecutionPlan: %v", err)
	}
	if err := sess.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	tr.CloseIdleConnections()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 20*time.Second); code != exitOK {
		t.Fatalf("exit code after SIGTERM = %d, want %d", code, exitOK)
	}

	// A new process on the same directory has the plan.
	os.Remove(addrFile)
	p = startJobplane(t, "hastore", "--listen", "127.0.0.1:0", "--listen-addr-file", addrFile, "--data-dir", dir)
	url = "http://" + waitForFile(t, p, addrFile)
	store = hastorerpc.NewClient(hastorerpc.ClientConfig{HTTPClient: &http.Client{Transport: tr}, BaseURL: url})
	got, err := store.GetExecutionPlan(ctx, "durable")
	if err != nil || got.GetJobGraph().GetName() != "durable" {
		t.Errorf("plan after restart = %v, %v", got, err)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want int
	}{
		{"no subcommand", nil, exitUsage},
		{"unknown subcommand", []string{"frobnicate"}, exitUsage},
		{"unknown flag", []string{"standalone", "--no-such-flag"}, exitUsage},
		{"stray argument", []string{"standalone", "extra"}, exitUsage},
		{"bad log level", []string{"standalone", "--log-level", "loud"}, exitUsage},
		{"help", []string{"help"}, exitOK},
		{"subcommand help", []string{"standalone", "-h"}, exitOK},
		{"hastore help", []string{"hastore", "-h"}, exitOK},
		{"hastore stray argument", []string{"hastore", "extra"}, exitUsage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if got := jobplaneMain(tc.args, &stdout, &stderr); got != tc.want {
				t.Errorf("exit code = %d, want %d; stderr:\n%s", got, tc.want, stderr.String())
			}
		})
	}
}

func TestListenFailureExitsNonZero(t *testing.T) {
	var stdout, stderr bytes.Buffer
	// A port that is not a number passes flag parsing but cannot be bound.
	if got := jobplaneMain([]string{"standalone", "--listen", "127.0.0.1:notaport", "--data-dir", t.TempDir()}, &stdout, &stderr); got != exitError {
		t.Errorf("exit code = %d, want %d; stderr:\n%s", got, exitError, stderr.String())
	}
}

// A server started on a data directory that another process holds exits
// at once, naming the directory and the holder's pid, instead of hanging
// in etcd's own file lock.
func TestHeldDataDirExitsFast(t *testing.T) {
	dir := t.TempDir()
	addrFile := filepath.Join(t.TempDir(), "addr")
	holder := startJobplane(t, "hastore", "--listen", "127.0.0.1:0", "--listen-addr-file", addrFile, "--data-dir", dir)
	// The address is written before the store opens; a health answer
	// comes only once the holder has the directory.
	waitServing(t, "http://"+waitForFile(t, holder, addrFile))

	second := startJobplane(t, "standalone", "--listen", "127.0.0.1:0", "--data-dir", dir)
	if code := second.wait(t, 5*time.Second); code != exitError {
		t.Errorf("exit code = %d, want %d", code, exitError)
	}
	want := fmt.Sprintf("data directory %s is in use by another process (pid %d)", dir, holder.cmd.Process.Pid)
	if got := second.stderr.String(); !strings.Contains(got, want) {
		t.Errorf("stderr lacks %q:\n%s", want, got)
	}
}

// waitServing polls the gRPC health of the server at url until it answers
// SERVING, bounded by a deadline.
func waitServing(t *testing.T, url string) {
	t.Helper()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	hc := grpchealth.NewClient(&http.Client{Transport: tr}, url)
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := hc.Check(ctx, &grpchealth.CheckRequest{})
		cancel()
		if err == nil && resp.Status == grpchealth.StatusServing {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not serving after 20s: %v, %v", url, resp, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Every server subcommand takes --max-request-bytes.
func TestServersTakeMaxRequestBytes(t *testing.T) {
	for _, sub := range []string{"standalone", "jobmanager", "taskexecutor", "hastore"} {
		t.Run(sub, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := jobplaneMain([]string{sub, "-h"}, &stdout, &stderr); code != exitOK {
				t.Fatalf("%s -h: exit code %d", sub, code)
			}
			if !strings.Contains(stderr.String(), "-max-request-bytes") {
				t.Errorf("%s -h lacks -max-request-bytes:\n%s", sub, stderr.String())
			}
		})
	}
}

// A request over --max-request-bytes is refused RESOURCE_EXHAUSTED over
// Connect and gRPC, and nothing of it happens; the server keeps serving.
func TestMaxRequestBytesRefusesLargeRequests(t *testing.T) {
	const limit = 64 << 10
	addrFile := filepath.Join(t.TempDir(), "addr")
	p := startJobplane(t, "standalone", "--listen", "127.0.0.1:0", "--listen-addr-file", addrFile,
		"--data-dir", t.TempDir(), "--task-executors", "0", "--max-request-bytes", fmt.Sprint(limit))
	url := "http://" + waitForFile(t, p, addrFile)

	var h2c http.Protocols
	h2c.SetUnencryptedHTTP2(true)
	h2cTransport := &http.Transport{Protocols: &h2c}
	h1Transport := &http.Transport{}
	defer h2cTransport.CloseIdleConnections()
	defer h1Transport.CloseIdleConnections()
	// Wait for the Dispatcher to lead, so that a refusal can only come from
	// the limit.
	leader := jobplanev1connect.NewDispatcherServiceClient(&http.Client{Transport: h1Transport}, url)
	for deadline := time.Now().Add(30 * time.Second); ; {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := leader.GetClusterOverview(ctx, &jobplanev1.GetClusterOverviewRequest{})
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("standalone not leading after 30s: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, tc := range []struct {
		name   string
		client *http.Client
		opts   []connect.ClientOption
	}{
		{"connect-http1", &http.Client{Transport: h1Transport}, nil},
		{"grpc-h2c", &http.Client{Transport: h2cTransport}, []connect.ClientOption{connect.WithGRPC()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := jobplanev1connect.NewDispatcherServiceClient(tc.client, url, tc.opts...)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			big := &jobplanev1.JobGraph{Name: strings.Repeat("x", 2*limit), Vertices: []*jobplanev1.JobVertex{{Id: "v", Invokable: "noop", Parallelism: 1}}}
			_, err := client.SubmitJob(ctx, &jobplanev1.SubmitJobRequest{JobId: "big", JobGraph: big})
			if got := connect.CodeOf(err); got != connect.CodeResourceExhausted {
				t.Errorf("SubmitJob over the limit: code %v (%.200v), want resource_exhausted", got, err)
			}
			if _, err := client.GetJob(ctx, &jobplanev1.GetJobRequest{JobId: "big"}); connect.CodeOf(err) != connect.CodeNotFound {
				t.Errorf("GetJob of the refused job = %.200v, want not_found", err)
			}
			small := &jobplanev1.JobGraph{Name: "small", Vertices: []*jobplanev1.JobVertex{{Id: "v", Invokable: "noop", Parallelism: 1}}}
			if _, err := client.SubmitJob(ctx, &jobplanev1.SubmitJobRequest{JobId: "small-" + tc.name, JobGraph: small}); err != nil {
				t.Errorf("SubmitJob within the limit: %v", err)
			}
		})
	}
}

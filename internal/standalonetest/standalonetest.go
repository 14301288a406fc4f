// Package standalonetest starts `jobplane standalone` as a child process
// for the tests of the SDK and the examples, which cannot import the
// server's internal test harness: the real binary, built once per test
// binary, on a loopback port of its own and a fresh data directory.
//
// It is for tests only: it builds with the go command found on PATH.
package standalonetest

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
)

var build struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// Main runs m and then removes the binaries that Binary built. Call it
// from TestMain: os.Exit(standalonetest.Main(m)).
func Main(m *testing.M) int {
	code := m.Run()
	if build.dir != "" {
		os.RemoveAll(build.dir)
	}
	return code
}

// Build builds the Go main package pkg (an import path or a directory)
// into a temporary directory that Main removes, and returns the program's
// path. It fails the test if the build fails.
func Build(t testing.TB, pkg, name string) string {
	t.Helper()
	build.once.Do(func() { build.dir, build.err = os.MkdirTemp("", "standalonetest-") })
	if build.err != nil {
		t.Fatal(build.err)
	}
	path := filepath.Join(build.dir, name)
	cmd := exec.Command("go", "build", "-o", path, pkg)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	return path
}

var jobplane struct {
	once sync.Once
	path string
}

// Binary returns the path of the jobplane binary, building it on first
// use.
func Binary(t testing.TB) string {
	t.Helper()
	jobplane.once.Do(func() {
		jobplane.path = Build(t, "github.com/jobplane/jobplane/server/cmd/jobplane", "jobplane")
	})
	if jobplane.path == "" {
		t.Fatal("the jobplane binary failed to build earlier")
	}
	return jobplane.path
}

// Cluster is a running `jobplane standalone`.
type Cluster struct {
	// URL is the cluster's base URL, where it serves DispatcherService and
	// HAStoreService.
	URL string
	// Dispatcher calls the cluster's DispatcherService over HTTP/1.1.
	Dispatcher jobplanev1connect.DispatcherServiceClient
}

// Start starts `jobplane standalone` without TaskExecutors of its own
// (plus args), waits until it answers as the leader, and kills it when the
// test ends; its log is printed if the test failed.
func Start(t testing.TB, args ...string) *Cluster {
	t.Helper()
	dir := t.TempDir()
	addrFile := filepath.Join(dir, "addr")
	args = append([]string{"standalone", "--listen", "127.0.0.1:0", "--listen-addr-file", addrFile,
		"--data-dir", filepath.Join(dir, "data"), "--task-executors", "0"}, args...)
	cmd := exec.Command(Binary(t), args...)
	var stderr Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start jobplane: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	tr := &http.Transport{}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("jobplane standalone log:\n%s", stderr.String())
		}
	})

	deadline := time.Now().Add(30 * time.Second)
	var addr string
	for addr == "" {
		if b, err := os.ReadFile(addrFile); err == nil && len(b) > 0 {
			addr = strings.TrimSpace(string(b))
			break
		}
		select {
		case err := <-done:
			done <- err
			t.Fatalf("jobplane standalone exited before listening: %v\n%s", err, stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("jobplane standalone wrote no address within 30s")
		}
	}
	c := &Cluster{URL: "http://" + addr}
	c.Dispatcher = jobplanev1connect.NewDispatcherServiceClient(&http.Client{Transport: tr}, c.URL)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := c.Dispatcher.GetClusterOverview(ctx, &jobplanev1.GetClusterOverviewRequest{})
		cancel()
		if err == nil {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("jobplane standalone not answering after 30s: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// WaitTaskExecutor waits until a TaskExecutor offering invokable is
// registered, and returns it. It fails the test after 30s.
func (c *Cluster) WaitTaskExecutor(t testing.TB, invokable string) *jobplanev1.TaskExecutorInfo {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := c.Dispatcher.ListTaskExecutors(ctx, &jobplanev1.ListTaskExecutorsRequest{})
		cancel()
		for _, te := range resp.GetTaskExecutors() {
			for _, name := range te.GetInvokables() {
				if name == invokable {
					return te
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no TaskExecutor offers %q after 30s (last answer %v, %v)", invokable, resp, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Submit submits a one-vertex job running invokable with parallelism and
// config, under the job id id.
func (c *Cluster) Submit(t testing.TB, id, invokable string, parallelism int32, config map[string]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := c.Dispatcher.SubmitJob(ctx, &jobplanev1.SubmitJobRequest{JobId: id, JobGraph: &jobplanev1.JobGraph{
		Name:     id,
		Vertices: []*jobplanev1.JobVertex{{Id: "v", Name: "v", Invokable: invokable, Parallelism: parallelism, Config: config}},
	}})
	if err != nil {
		t.Fatalf("submit %s: %v", id, err)
	}
}

// Result waits for the job's result, up to 60s.
func (c *Cluster) Result(t testing.TB, id string) *jobplanev1.JobResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := c.Dispatcher.GetJobResult(ctx, &jobplanev1.GetJobResultRequest{JobId: id, Wait: true})
	if err != nil {
		t.Fatalf("result of %s: %v", id, err)
	}
	return resp.GetResult()
}

// Cancel cancels the job.
func (c *Cluster) Cancel(t testing.TB, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Dispatcher.CancelJob(ctx, &jobplanev1.CancelJobRequest{JobId: id}); err != nil {
		t.Fatalf("cancel %s: %v", id, err)
	}
}

// Buffer is a bytes.Buffer that a child process may write while the test
// reads it.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

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
	"errors"
	"fmt"
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
	err  error
}

// Main runs m and then removes the binaries built for it. Call it from
// TestMain: os.Exit(standalonetest.Main(m)).
func Main(m *testing.M) int {
	code := m.Run()
	if build.dir != "" {
		os.RemoveAll(build.dir)
	}
	return code
}

// BuildProgram builds the Go main package pkg (an import path) into a
// temporary directory that Main removes, and returns the program's path.
func BuildProgram(pkg, name string) (string, error) {
	build.once.Do(func() { build.dir, build.err = os.MkdirTemp("", "standalonetest-") })
	if build.err != nil {
		return "", build.err
	}
	path := filepath.Join(build.dir, name)
	if out, err := exec.Command("go", "build", "-o", path, pkg).CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
	}
	return path, nil
}

// Build is BuildProgram that fails the test if the build fails.
func Build(t testing.TB, pkg, name string) string {
	t.Helper()
	path, err := BuildProgram(pkg, name)
	if err != nil {
		t.Fatal(err)
	}
	return path
}

var jobplane struct {
	once sync.Once
	path string
	err  error
}

// Binary returns the path of the jobplane binary that Launch runs,
// building it on first use, for tests that run it themselves (with flags
// Launch cannot wait on, such as authentication).
func Binary() (string, error) { return binary() }

// binary returns the path of the jobplane binary, building it on first
// use.
func binary() (string, error) {
	jobplane.once.Do(func() {
		jobplane.path, jobplane.err = BuildProgram("github.com/jobplane/jobplane/server/cmd/jobplane", "jobplane")
	})
	return jobplane.path, jobplane.err
}

// Cluster is a running `jobplane standalone`.
type Cluster struct {
	// URL is the cluster's base URL, where it serves DispatcherService and
	// HAStoreService.
	URL string
	// Dispatcher calls the cluster's DispatcherService over HTTP/1.1.
	Dispatcher jobplanev1connect.DispatcherServiceClient

	cmd    *exec.Cmd
	done   chan error
	stderr *Buffer
	dir    string
	tr     *http.Transport
}

// Launch starts `jobplane standalone` without TaskExecutors of its own
// (plus args) on a fresh data directory, and waits until it answers as the
// leader. Stop it with Stop.
func Launch(args ...string) (*Cluster, error) {
	bin, err := binary()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "standalone-")
	if err != nil {
		return nil, err
	}
	addrFile := filepath.Join(dir, "addr")
	args = append([]string{"standalone", "--listen", "127.0.0.1:0", "--listen-addr-file", addrFile,
		"--data-dir", filepath.Join(dir, "data"), "--task-executors", "0"}, args...)
	c := &Cluster{cmd: exec.Command(bin, args...), done: make(chan error, 1), stderr: new(Buffer), dir: dir, tr: &http.Transport{}}
	c.cmd.Stderr = c.stderr
	if err := c.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start jobplane: %w", err)
	}
	go func() { c.done <- c.cmd.Wait() }()
	if err := c.ready(addrFile); err != nil {
		c.Stop()
		return nil, fmt.Errorf("%w\njobplane standalone log:\n%s", err, c.stderr)
	}
	return c, nil
}

func (c *Cluster) ready(addrFile string) error {
	deadline := time.Now().Add(30 * time.Second)
	for c.URL == "" {
		if b, err := os.ReadFile(addrFile); err == nil && len(b) > 0 {
			c.URL = "http://" + strings.TrimSpace(string(b))
			break
		}
		select {
		case err := <-c.done:
			c.done <- err
			return fmt.Errorf("jobplane standalone exited before listening: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return errors.New("jobplane standalone wrote no address within 30s")
		}
	}
	c.Dispatcher = jobplanev1connect.NewDispatcherServiceClient(&http.Client{Transport: c.tr}, c.URL)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := c.Dispatcher.GetClusterOverview(ctx, &jobplanev1.GetClusterOverviewRequest{})
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("jobplane standalone not answering after 30s: %w", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop kills the process, waits for it and removes its data.
func (c *Cluster) Stop() {
	c.tr.CloseIdleConnections()
	_ = c.cmd.Process.Kill()
	err := <-c.done
	c.done <- err
	os.RemoveAll(c.dir)
}

// Log returns what the process wrote to its stderr so far.
func (c *Cluster) Log() string { return c.stderr.String() }

// Start is Launch for one test: it fails the test if the cluster does not
// start, stops the cluster when the test ends, and then prints its log if
// the test failed.
func Start(t testing.TB, args ...string) *Cluster {
	t.Helper()
	c, err := Launch(args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Stop()
		if t.Failed() {
			t.Logf("jobplane standalone log:\n%s", c.Log())
		}
	})
	return c
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

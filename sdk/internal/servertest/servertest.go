// Package servertest runs the jobplane server as child processes for the
// SDK's tests. The SDK module links no server code, so its tests reach a
// real cluster the way its users do: through the jobplane binary, on
// loopback ports of its own and fresh data directories.
//
// The binary is $JOBPLANE_BIN when set (make test builds it once into
// bin/), else it is built once per test binary with the go command on
// PATH, which finds the server through the repository's go.work.
//
// It is for tests only.
package servertest

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
)

// BinEnv names the environment variable that gives a jobplane binary to
// use instead of building one.
const BinEnv = "JOBPLANE_BIN"

// serverPackage is the import path of the jobplane binary's main package.
const serverPackage = "github.com/jobplane/jobplane/server/cmd/jobplane"

// startTimeout bounds how long a child may take to listen and answer.
const startTimeout = 30 * time.Second

var build struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// Binary returns the path of the jobplane binary: $JOBPLANE_BIN, or one
// built on first use into a temporary directory that Main removes.
func Binary() (string, error) {
	if bin := os.Getenv(BinEnv); bin != "" {
		return bin, nil
	}
	build.once.Do(func() {
		if build.dir, build.err = os.MkdirTemp("", "servertest-"); build.err != nil {
			return
		}
		build.path = filepath.Join(build.dir, "jobplane")
		if out, err := exec.Command("go", "build", "-o", build.path, serverPackage).CombinedOutput(); err != nil {
			build.err = fmt.Errorf("go build %s: %v\n%s", serverPackage, err, out)
		}
	})
	return build.path, build.err
}

// Main runs m and then removes the binary built for it. Call it from
// TestMain: os.Exit(servertest.Main(m)).
func Main(m *testing.M) int {
	code := m.Run()
	if build.dir != "" {
		os.RemoveAll(build.dir)
	}
	return code
}

// Process is one jobplane child process.
type Process struct {
	// URL is the base URL it serves at.
	URL string

	cmd  *exec.Cmd
	done chan struct{}
	log  *Buffer
}

// Spawn starts `jobplane args...` on a loopback port of its own with
// warnings logged, and returns once it listens (not once it leads). dir
// holds the file it writes its address to.
func Spawn(dir string, args ...string) (*Process, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	addrFile, err := os.CreateTemp(dir, "addr-")
	if err != nil {
		return nil, err
	}
	addrFile.Close()
	args = append(slices.Clone(args), "--listen", "127.0.0.1:0", "--listen-addr-file", addrFile.Name(), "--log-level", "warn")
	p := &Process{cmd: exec.Command(bin, args...), done: make(chan struct{}), log: new(Buffer)}
	p.cmd.Stderr = p.log
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start jobplane %s: %w", args[0], err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	deadline := time.Now().Add(startTimeout)
	for {
		if b, err := os.ReadFile(addrFile.Name()); err == nil && len(b) > 0 {
			p.URL = "http://" + strings.TrimSpace(string(b))
			return p, nil
		}
		if time.Now().After(deadline) {
			p.Kill()
			return nil, fmt.Errorf("jobplane %s wrote no address within %v:\n%s", args[0], startTimeout, p.Log())
		}
		select {
		case <-p.done:
			return nil, fmt.Errorf("jobplane %s exited before listening:\n%s", args[0], p.Log())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Kill sends SIGKILL and waits until the process has exited.
func (p *Process) Kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Stop sends SIGTERM, a graceful stop, and waits until the process has
// exited.
func (p *Process) Stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	<-p.done
}

// Log returns what the process wrote to its stderr so far.
func (p *Process) Log() string { return p.log.String() }

// SpawnT is Spawn for one test: it fails the test if the process does not
// start, kills it when the test ends, and then prints its log if the test
// failed.
func SpawnT(t testing.TB, dir string, args ...string) *Process {
	t.Helper()
	p, err := Spawn(dir, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("jobplane %s log:\n%s", args[0], p.Log())
		}
	})
	return p
}

// Cluster is a running `jobplane standalone`.
type Cluster struct {
	*Process
	// Dispatcher calls the cluster's DispatcherService over HTTP/1.1.
	Dispatcher jobplanev1connect.DispatcherServiceClient

	dir string
	tr  *http.Transport
}

// Launch starts `jobplane standalone` without TaskExecutors of its own
// (plus args) on a fresh data directory, and waits until it answers as the
// leader. Stop it with Close.
func Launch(args ...string) (*Cluster, error) {
	dir, err := os.MkdirTemp("", "standalone-")
	if err != nil {
		return nil, err
	}
	args = append([]string{"standalone", "--data-dir", filepath.Join(dir, "data"), "--task-executors", "0"}, args...)
	p, err := Spawn(dir, args...)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	c := &Cluster{Process: p, dir: dir, tr: &http.Transport{}}
	c.Dispatcher = jobplanev1connect.NewDispatcherServiceClient(&http.Client{Transport: c.tr}, c.URL)
	if err := c.ready(); err != nil {
		c.Close()
		return nil, fmt.Errorf("%w\njobplane standalone log:\n%s", err, p.Log())
	}
	return c, nil
}

// ready waits until the cluster answers GetClusterOverview.
func (c *Cluster) ready() error {
	deadline := time.Now().Add(startTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := c.Dispatcher.GetClusterOverview(ctx, &jobplanev1.GetClusterOverviewRequest{})
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("jobplane standalone not answering after %v: %w", startTimeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Close kills the process, waits for it and removes its data.
func (c *Cluster) Close() {
	c.tr.CloseIdleConnections()
	c.Kill()
	os.RemoveAll(c.dir)
}

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
		c.Close()
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
	deadline := time.Now().Add(startTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := c.Dispatcher.ListTaskExecutors(ctx, &jobplanev1.ListTaskExecutorsRequest{})
		cancel()
		for _, te := range resp.GetTaskExecutors() {
			if slices.Contains(te.GetInvokables(), invokable) {
				return te
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no TaskExecutor offers %q after %v (last answer %v, %v)", invokable, startTimeout, resp, err)
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

package localcluster

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
)

// Standalone is a `jobplane standalone` process: a whole cluster in one
// child process, the real binary on a loopback port of its own and a
// fresh data directory. It is what the SDK's and the examples' tests run
// against, and any test that needs the server as a user runs it.
type Standalone struct {
	*Process
	dispatcher jobplanev1connect.DispatcherServiceClient
	tr         *http.Transport
}

// StartStandalone builds the jobplane binary (once per process:
// JobplaneBinary) and starts `jobplane standalone` on a free loopback
// port and a fresh data directory, without TaskExecutors of its own,
// then with args, and waits until it answers as the leader. It fails if
// the process exits first, or is not ready within 30s or before ctx ends;
// nothing is left running then. Stop it with Stop.
func StartStandalone(ctx context.Context, args ...string) (*Standalone, error) {
	bin, err := JobplaneBinary()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "localcluster-standalone-")
	if err != nil {
		return nil, err
	}
	s := &Standalone{tr: &http.Transport{}}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	s.Process, err = StartServer(ctx, ServerCommand{
		Name: "standalone", Dir: dir, Program: bin, Verb: "standalone",
		Args: append([]string{"--data-dir", filepath.Join(dir, "data"), "--task-executors", "0"}, args...),
		Ready: func(ctx context.Context, p *Process) error {
			s.dispatcher = jobplanev1connect.NewDispatcherServiceClient(&http.Client{Transport: s.tr}, p.URL())
			return p.Poll(ctx, 20*time.Millisecond, func(ctx context.Context) error {
				ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
				_, err := s.dispatcher.GetClusterOverview(ctx, &jobplanev1.GetClusterOverviewRequest{})
				return err
			})
		},
	})
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("localcluster: jobplane standalone: %w", err)
	}
	return s, nil
}

// NewStandalone is StartStandalone for a test: it fails the test if the
// process does not start, stops it when the test ends, and then logs its
// log if the test failed.
func NewStandalone(t TB, args ...string) *Standalone {
	t.Helper()
	s, err := StartStandalone(context.Background(), args...)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(func() {
		s.Kill()
		if t.Failed() {
			t.Logf("jobplane standalone log:\n%s", s.Log())
		}
		s.Stop()
	})
	return s
}

// Dispatcher returns a client of the cluster's DispatcherService
// (HTTP/1.1, no retries).
func (s *Standalone) Dispatcher() jobplanev1connect.DispatcherServiceClient { return s.dispatcher }

// Stop kills the process, waits for it and removes its directory; its
// log is gone then, so read it (Log) first. It may be called more than
// once.
func (s *Standalone) Stop() {
	s.tr.CloseIdleConnections()
	s.Kill()
	os.RemoveAll(s.Dir)
}

// WaitTaskExecutor waits until a TaskExecutor offering invokable is
// registered, and returns it. It fails the test after 30s.
func (s *Standalone) WaitTaskExecutor(t TB, invokable string) *jobplanev1.TaskExecutorInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var found *jobplanev1.TaskExecutorInfo
	err := waitFor(ctx, 20*time.Millisecond, func(ctx context.Context) error {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		resp, err := s.dispatcher.ListTaskExecutors(cctx, &jobplanev1.ListTaskExecutorsRequest{})
		for _, te := range resp.GetTaskExecutors() {
			if slices.Contains(te.GetInvokables(), invokable) {
				found = te
				return nil
			}
		}
		return fmt.Errorf("last answer %v, %v", resp, err)
	})
	if err != nil {
		t.Fatalf("no TaskExecutor offers %q: %v", invokable, err)
	}
	return found
}

// Submit submits a one-vertex job running invokable with parallelism and
// config, under the job id id; it fails the test if the submission does
// not succeed within 30s.
func (s *Standalone) Submit(t TB, id, invokable string, parallelism int32, config map[string]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := s.dispatcher.SubmitJob(ctx, &jobplanev1.SubmitJobRequest{JobId: id, JobGraph: &jobplanev1.JobGraph{
		Name:     id,
		Vertices: []*jobplanev1.JobVertex{{Id: "v", Name: "v", Invokable: invokable, Parallelism: parallelism, Config: config}},
	}})
	if err != nil {
		t.Fatalf("submit %s: %v", id, err)
	}
}

// Result waits for the job's result, up to 60s, failing the test
// without it.
func (s *Standalone) Result(t TB, id string) *jobplanev1.JobResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := s.dispatcher.GetJobResult(ctx, &jobplanev1.GetJobResultRequest{JobId: id, Wait: true})
	if err != nil {
		t.Fatalf("result of %s: %v", id, err)
	}
	return resp.GetResult()
}

// Cancel cancels the job, failing the test if that does not succeed
// within 30s.
func (s *Standalone) Cancel(t TB, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.dispatcher.CancelJob(ctx, &jobplanev1.CancelJobRequest{JobId: id}); err != nil {
		t.Fatalf("cancel %s: %v", id, err)
	}
}

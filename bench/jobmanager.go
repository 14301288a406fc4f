package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
	"github.com/jobplane/jobplane/server/localcluster"
)

// Bounds of a JobManager process's life.
const (
	jobManagerStartTimeout = 30 * time.Second
	// jobManagerStopTimeout is how long a SIGTERM gets before SIGKILL: a
	// JobManager with thousands of jobs may take long to wind down, and the
	// bench has no use for a graceful end beyond the first seconds.
	jobManagerStopTimeout = 5 * time.Second
)

// JobManager is a `jobplane jobmanager` process on an embedded etcd member
// in a temporary directory, listening on a loopback port of its own.
type JobManager struct {
	// URL is the base URL of its endpoint.
	URL string
	// Dispatcher is an h2c client of its DispatcherService.
	Dispatcher jobplanev1connect.DispatcherServiceClient

	proc *localcluster.Process // nil once stopped
}

// StartJobManager starts bin (the jobplane binary) as `jobplane
// jobmanager` with its data, address file and log in a fresh temporary
// directory, plus extra flags, and waits until its address is known. It
// fails if the process exits or says nothing within 30s; the process is
// then stopped and its directory removed.
func StartJobManager(ctx context.Context, bin string, logLevel string, extra ...string) (*JobManager, error) {
	return StartJobManagerEnv(ctx, bin, logLevel, nil, extra...)
}

// StartJobManagerEnv is StartJobManager with env added to the bench's
// environment for the process (such as GOMEMLIMIT=240MiB).
func StartJobManagerEnv(ctx context.Context, bin string, logLevel string, env []string, extra ...string) (*JobManager, error) {
	var environ []string
	if len(env) > 0 {
		environ = append(os.Environ(), env...)
	}
	dir, err := os.MkdirTemp("", "jobplane-bench-jm-*")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, jobManagerStartTimeout)
	defer cancel()
	// The process dies with the bench, whatever kills the bench.
	p, err := localcluster.StartServer(ctx, localcluster.ServerCommand{
		Name: "jobmanager", Dir: dir, Program: bin, Verb: "jobmanager", Env: environ,
		Args: append([]string{
			"--data-dir", filepath.Join(dir, "data"),
			"--log-level", logLevel,
			// The bench measures the engine: its clients, all on one
			// address, submit and watch far beyond one client's default
			// limits.
			"--submit-rate", "0", "--max-streams-per-client", "0",
		}, extra...),
	})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return &JobManager{URL: p.URL(), Dispatcher: jobplanev1connect.NewDispatcherServiceClient(NewHTTPClient(H2C), p.URL()), proc: p}, nil
}

// PID returns the process id.
func (jm *JobManager) PID() int { return jm.proc.PID() }

// Exited reports whether the process has ended.
func (jm *JobManager) Exited() bool {
	select {
	case <-jm.proc.Exited():
		return true
	default:
		return false
	}
}

// LogTail returns the last n lines of the process's log.
func (jm *JobManager) LogTail(n int) string {
	lines := strings.Split(strings.TrimRight(jm.proc.Log(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// WaitReady waits until the JobManager leads and its ResourceManager
// knows at least taskExecutors TaskExecutors with slots slots in all, or
// fails after timeout.
func (jm *JobManager) WaitReady(ctx context.Context, taskExecutors, slots int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := jm.Dispatcher.GetClusterOverview(cctx, &jobplanev1.GetClusterOverviewRequest{})
		cancel()
		if err == nil && int(resp.GetTaskExecutorCount()) >= taskExecutors && int(resp.GetSlotCount()) >= slots {
			return nil
		}
		if jm.Exited() {
			runs := jm.proc.Runs()
			return fmt.Errorf("jobmanager exited (%v): %s", runs[len(runs)-1].State, jm.LogTail(20))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster not ready within %v (want %d TaskExecutors, %d slots): overview %v, err %v", timeout, taskExecutors, slots, resp, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Stop stops the process (SIGTERM, then SIGKILL after 5s), reaps it and
// removes its directory. It may be called more than once.
func (jm *JobManager) Stop() {
	if jm.proc == nil {
		return
	}
	jm.proc.Terminate(jobManagerStopTimeout)
	if err := os.RemoveAll(jm.proc.Dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		fmt.Fprintf(os.Stderr, "bench: removing %s: %v\n", jm.proc.Dir, err)
	}
	jm.proc = nil
}

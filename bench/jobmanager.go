package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
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

	cmd  *exec.Cmd
	dir  string
	done chan struct{} // closed once the process has been reaped
	err  error         // the process's exit, valid once done is closed
}

// StartJobManager starts bin (the jobplane binary) as `jobplane
// jobmanager` with its data, address file and log in a fresh temporary
// directory, plus extra flags, and waits until its address is known. It
// fails if the process exits or says nothing within 30s; the process is
// then stopped and its directory removed.
func StartJobManager(ctx context.Context, bin string, logLevel string, extra ...string) (*JobManager, error) {
	dir, err := os.MkdirTemp("", "jobplane-bench-jm-*")
	if err != nil {
		return nil, err
	}
	addrFile := filepath.Join(dir, "addr")
	logFile, err := os.Create(filepath.Join(dir, "jobmanager.log"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	defer logFile.Close()
	args := append([]string{"jobmanager",
		"--data-dir", filepath.Join(dir, "data"),
		"--listen", "127.0.0.1:0", "--listen-addr-file", addrFile,
		"--log-level", logLevel,
		// The bench measures the engine: its clients, all on one address,
		// submit and watch far beyond one client's default limits.
		"--submit-rate", "0", "--max-streams-per-client", "0",
	}, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// The JobManager dies with the bench, whatever kills the bench.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	jm := &JobManager{cmd: cmd, dir: dir, done: make(chan struct{})}
	go func() { jm.err = cmd.Wait(); close(jm.done) }()

	addr, err := jm.waitAddr(ctx, addrFile)
	if err != nil {
		jm.Stop()
		return nil, err
	}
	jm.URL = "http://" + addr
	jm.Dispatcher = jobplanev1connect.NewDispatcherServiceClient(NewHTTPClient(H2C), jm.URL)
	return jm, nil
}

func (jm *JobManager) waitAddr(ctx context.Context, addrFile string) (string, error) {
	deadline := time.Now().Add(jobManagerStartTimeout)
	for {
		if b, err := os.ReadFile(addrFile); err == nil && len(bytes.TrimSpace(b)) > 0 {
			return string(bytes.TrimSpace(b)), nil
		}
		select {
		case <-jm.done:
			return "", fmt.Errorf("jobmanager exited before listening (%v): %s", jm.err, jm.LogTail(20))
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("jobmanager wrote no address within %v: %s", jobManagerStartTimeout, jm.LogTail(20))
		}
	}
}

// PID returns the process id.
func (jm *JobManager) PID() int { return jm.cmd.Process.Pid }

// Exited reports whether the process has ended.
func (jm *JobManager) Exited() bool {
	select {
	case <-jm.done:
		return true
	default:
		return false
	}
}

// LogTail returns the last n lines of the process's log.
func (jm *JobManager) LogTail(n int) string {
	b, err := os.ReadFile(filepath.Join(jm.dir, "jobmanager.log"))
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
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
			return fmt.Errorf("jobmanager exited (%v): %s", jm.err, jm.LogTail(20))
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
	if jm.cmd == nil {
		return
	}
	if !jm.Exited() {
		_ = jm.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-jm.done:
		case <-time.After(jobManagerStopTimeout):
			_ = jm.cmd.Process.Kill()
			<-jm.done
		}
	}
	if err := os.RemoveAll(jm.dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		fmt.Fprintf(os.Stderr, "bench: removing %s: %v\n", jm.dir, err)
	}
	jm.cmd = nil
}

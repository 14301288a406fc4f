package hacluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// Process is one child process of a Cluster: an etcd member, a jobmanager,
// a TaskExecutor or the HA-store server of the TaskExecutors. It keeps its
// directory (data, address file, log) across restarts. Its methods are safe
// for concurrent use.
type Process struct {
	// Name names the process in logs and errors, such as "jobmanager-1".
	Name string
	// Dir is the process's own directory: its working directory, its data
	// and its log ("log", stderr and stdout of every run).
	Dir string

	bin   string
	url   string                          // a server's base URL, once known
	args  func() []string                 // the arguments of the next run
	ready func(ctx context.Context) error // waits until a new run serves

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{} // closed when the current run has exited
	runs    []Run
	stopped bool
}

// Run is one run of a Process: when it started, and when it exited (zero
// while it runs).
type Run struct {
	Start, Exit time.Time
}

func newProcess(name, dir, bin string, args func() []string, ready func(context.Context) error) (*Process, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	closed := make(chan struct{})
	close(closed)
	return &Process{Name: name, Dir: dir, bin: bin, args: args, ready: ready, exited: closed}, nil
}

// start starts a new run; the previous one must have exited.
func (p *Process) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.exited:
	default:
		return fmt.Errorf("%s: still running", p.Name)
	}
	log, err := os.OpenFile(filepath.Join(p.Dir, "log"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	fmt.Fprintf(log, "=== %s: start %s\n", time.Now().Format(time.RFC3339Nano), p.Name)
	cmd := exec.Command(p.bin, p.args()...)
	cmd.Dir = p.Dir
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.Name, err)
	}
	exited := make(chan struct{})
	p.cmd, p.exited, p.stopped = cmd, exited, false
	p.runs = append(p.runs, Run{Start: time.Now()})
	n := len(p.runs) - 1
	go func() {
		_ = cmd.Wait()
		p.mu.Lock()
		p.runs[n].Exit = time.Now()
		p.mu.Unlock()
		close(exited)
	}()
	return nil
}

// Restart starts the process again, with the arguments of its first run,
// on the same directory (and, for a jobmanager, the same address), and
// waits until it serves. The previous run must have exited.
func (p *Process) Restart(ctx context.Context) error {
	if err := p.start(); err != nil {
		return err
	}
	if err := p.ready(ctx); err != nil {
		return fmt.Errorf("%s: %w\n%s", p.Name, err, p.Log())
	}
	return nil
}

// Signal sends sig to the running process. It fails if the process has
// exited.
func (p *Process) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.exited:
		return fmt.Errorf("%s: not running", p.Name)
	default:
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("%s: %v: %w", p.Name, sig, err)
	}
	switch sig {
	case syscall.SIGSTOP:
		p.stopped = true
	case syscall.SIGCONT:
		p.stopped = false
	}
	return nil
}

// Kill sends SIGKILL and waits until the process has exited. Killing an
// exited process is no error.
func (p *Process) Kill() {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	select {
	case <-exited:
		return
	default:
	}
	_ = cmd.Process.Kill()
	<-exited
}

// Wait waits until the current run has exited, or ctx ends.
func (p *Process) Wait(ctx context.Context) error {
	select {
	case <-p.Exited():
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s still running: %w", p.Name, ctx.Err())
	}
}

// Exited is closed when the current run has exited.
func (p *Process) Exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exited
}

// Running reports whether the process runs and is not stopped by SIGSTOP.
func (p *Process) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.exited:
		return false
	default:
		return !p.stopped
	}
}

// Runs returns the process's runs so far, oldest first.
func (p *Process) Runs() []Run {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Run(nil), p.runs...)
}

// logTail is how much of a process's log Log returns.
const logTail = 32 << 10

// Log returns the end of the process's log (all its runs), up to 32 KiB.
func (p *Process) Log() string {
	f, err := os.Open(filepath.Join(p.Dir, "log"))
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > logTail {
		_, _ = f.Seek(st.Size()-logTail, io.SeekStart)
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// errExited is returned by readiness waits when the process exits first.
var errExited = errors.New("exited before it served")

// poll calls fn every interval until it returns nil, ctx ends, or the
// process exits.
func (p *Process) poll(ctx context.Context, interval time.Duration, fn func(ctx context.Context) error) error {
	exited := p.Exited()
	for {
		err := fn(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return errExited
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(interval):
		}
	}
}

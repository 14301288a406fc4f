package localcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Command says how a Process runs.
type Command struct {
	// Name names the process in its log and in errors, such as
	// "jobmanager-1". Required.
	Name string
	// Dir is the process's own directory, created if missing, where its
	// log (the file "log": stdout and stderr of every run) is kept.
	// Required.
	Dir string
	// WorkDir is the working directory of every run, where the program
	// finds the relative paths it was given. Default: Dir.
	WorkDir string
	// Path is the program: a path, relative to the calling process's
	// working directory, or a name looked up in PATH. Required.
	Path string
	// Args returns the arguments of each run, called before each start,
	// so that a run may differ from the first (listen on the address the
	// first one bound, say). Default: none.
	Args func() []string
	// Env is the environment of every run. Default: the calling process's.
	Env []string
	// Group runs the process in a process group of its own, and Signal
	// signals the whole group: for a program that starts children of its
	// own (a shell command, `go run`). Default: signals go to the process
	// alone.
	Group bool
	// Ready, if set, waits until a new run serves; Process.Poll helps it
	// give up when the run exits first. Default: a run is ready once it
	// started.
	Ready func(ctx context.Context, p *Process) error
}

// Process is a child process that can be signalled (SIGKILL, SIGTERM,
// SIGSTOP, SIGCONT), waited for and restarted on the same directory. It
// keeps a record of its runs and a log of all of them. On Linux it dies
// with the process that started it (a parent-death signal), so that a
// crash leaves no child behind. Its methods are safe for concurrent use.
type Process struct {
	// Name names the process, as Command.Name.
	Name string
	// Dir is the process's own directory, as Command.Dir.
	Dir string

	cmd Command

	mu      sync.Mutex
	run     *exec.Cmd
	exited  chan struct{} // closed when the current run has exited
	runs    []ProcessRun
	stopped bool
	url     string // a server's base URL, once known (StartServer)
}

// ProcessRun is one run of a Process: when it started, and when and how
// it exited (zero and nil while it runs).
type ProcessRun struct {
	Start, Exit time.Time
	// State is how the run exited, as its exec.Cmd reports it ("exit
	// status 1", "signal: killed"); nil while it runs.
	State *os.ProcessState
}

// StartProcess starts the first run of cmd and waits until it is ready
// (Command.Ready). It fails if the program cannot start, or is not ready
// before ctx ends or exits first; the process is then killed, and the
// error carries the end of its log.
func StartProcess(ctx context.Context, cmd Command) (*Process, error) {
	p, err := newProcess(cmd)
	if err != nil {
		return nil, err
	}
	if err := p.Restart(ctx); err != nil {
		p.Kill()
		return nil, err
	}
	return p, nil
}

// newProcess makes a process of cmd that has not run yet.
func newProcess(cmd Command) (*Process, error) {
	if cmd.Name == "" || cmd.Dir == "" || cmd.Path == "" {
		return nil, errors.New("localcluster: a command needs a name, a directory and a program")
	}
	if err := os.MkdirAll(cmd.Dir, 0o755); err != nil {
		return nil, err
	}
	// exec would take a relative path from the run's working directory.
	if strings.ContainsRune(cmd.Path, filepath.Separator) {
		abs, err := filepath.Abs(cmd.Path)
		if err != nil {
			return nil, err
		}
		cmd.Path = abs
	}
	closed := make(chan struct{})
	close(closed)
	return &Process{Name: cmd.Name, Dir: cmd.Dir, cmd: cmd, exited: closed}, nil
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
	log, err := os.OpenFile(p.LogPath(), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	fmt.Fprintf(log, "=== %s: start %s\n", time.Now().Format(time.RFC3339Nano), p.Name)
	var args []string
	if p.cmd.Args != nil {
		args = p.cmd.Args()
	}
	cmd := exec.Command(p.cmd.Path, args...)
	cmd.Dir, cmd.Env = p.Dir, p.cmd.Env
	if p.cmd.WorkDir != "" {
		cmd.Dir = p.cmd.WorkDir
	}
	// The log is a file: the child writes it directly, and no pipe is
	// left for a grandchild to hold open.
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = sysProcAttr(p.cmd.Group)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.Name, err)
	}
	exited := make(chan struct{})
	p.run, p.exited, p.stopped = cmd, exited, false
	p.runs = append(p.runs, ProcessRun{Start: time.Now()})
	n := len(p.runs) - 1
	go func() {
		_ = cmd.Wait()
		p.mu.Lock()
		p.runs[n].Exit, p.runs[n].State = time.Now(), cmd.ProcessState
		p.mu.Unlock()
		close(exited)
	}()
	return nil
}

// ready waits until the current run is ready.
func (p *Process) ready(ctx context.Context) error {
	if p.cmd.Ready == nil {
		return nil
	}
	if err := p.cmd.Ready(ctx, p); err != nil {
		return fmt.Errorf("%s: %w\n%s", p.Name, err, p.Log())
	}
	return nil
}

// Restart starts a new run, with the arguments Command.Args gives now,
// on the same directory, and waits until it is ready. The previous run
// must have exited (Kill, Wait).
func (p *Process) Restart(ctx context.Context) error {
	if err := p.start(); err != nil {
		return err
	}
	return p.ready(ctx)
}

// Signal sends sig to the running process (to its group with
// Command.Group). It fails if the process has exited.
func (p *Process) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.exited:
		return fmt.Errorf("%s: not running", p.Name)
	default:
	}
	if err := p.signal(sig); err != nil {
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

// signal sends sig to the current run; p.mu is held.
func (p *Process) signal(sig syscall.Signal) error {
	if p.cmd.Group {
		return syscall.Kill(-p.run.Process.Pid, sig)
	}
	return p.run.Process.Signal(sig)
}

// Kill sends SIGKILL (to the group with Command.Group) and waits until
// the process has exited. Killing an exited process is no error.
func (p *Process) Kill() {
	p.mu.Lock()
	exited := p.exited
	select {
	case <-exited:
		p.mu.Unlock()
		return
	default:
	}
	_ = p.signal(syscall.SIGKILL)
	p.mu.Unlock()
	<-exited
}

// Terminate asks the process to stop (SIGTERM) and waits for it to exit,
// for grace at most, after which it kills it (Kill). It reports whether
// the process exited by itself within grace; an exited process did.
func (p *Process) Terminate(grace time.Duration) bool {
	if err := p.Signal(syscall.SIGTERM); err != nil {
		return true
	}
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-p.Exited():
		return true
	case <-timer.C:
		p.Kill()
		return false
	}
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

// PID returns the process id of the current (or last) run, 0 before the
// first.
func (p *Process) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.run == nil {
		return 0
	}
	return p.run.Process.Pid
}

// Runs returns the process's runs so far, oldest first.
func (p *Process) Runs() []ProcessRun {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]ProcessRun(nil), p.runs...)
}

// URL returns the base URL of a server process (StartServer) once its
// first run wrote its address; it stays the same across restarts. It is
// "" for other processes.
func (p *Process) URL() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.url
}

// LogPath returns the path of the process's log: the output of all its
// runs, each after a line that says when it started.
func (p *Process) LogPath() string { return filepath.Join(p.Dir, "log") }

// logTail is how much of a process's log Log returns.
const logTail = 32 << 10

// Log returns the end of the process's log (all its runs), up to 32 KiB.
func (p *Process) Log() string {
	f, err := os.Open(p.LogPath())
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

// Poll calls fn every interval until it returns nil, ctx ends, or the
// current run exits (ErrExited): the wait of a Command.Ready.
func (p *Process) Poll(ctx context.Context, interval time.Duration, fn func(ctx context.Context) error) error {
	exited := p.Exited()
	for {
		err := fn(ctx)
		if err == nil {
			return nil
		}
		timer := time.NewTimer(interval)
		select {
		case <-exited:
			timer.Stop()
			return fmt.Errorf("%w (last: %v)", ErrExited, err)
		case <-ctx.Done():
			timer.Stop()
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-timer.C:
		}
	}
}

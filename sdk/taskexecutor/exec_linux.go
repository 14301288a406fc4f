package taskexecutor

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"unsafe"
)

// On Linux an exec task's command runs under a shim: the running binary
// (jobplane, a test binary, a user's program: whatever links this package)
// re-executed with shimEnv set, which the init below turns into the shim
// before main runs. The shim leads a new process group, gets SIGTERM from
// the kernel when the TaskExecutor dies (Pdeathsig), and then SIGKILLs
// its group, so the command and every descendant that stayed in the group
// die with the TaskExecutor, not only the direct child Pdeathsig covers.
// None of this needs privileges; cgroups and PID namespaces, which would
// contain the tree without a shim, do, and are often unavailable.
//
// The shim relays how the command ended on a status pipe (fd 3) instead of
// its exit code, because it ends by killing its whole group, itself
// included: that way no moment exists where the command has ended, the
// shim is gone and a leftover of the group waits for the TaskExecutor to
// kill it.

// shimEnv names the variable that makes the binary a shim; its value is
// the pid of the TaskExecutor process that started it.
const shimEnv = "JOBPLANE_EXEC_SHIM"

// shimCredEnv, set beside shimEnv, holds "UID:GID" when the command must
// run as that user and group. The shim itself keeps the TaskExecutor's
// user: as another user it could not re-execute /proc/self/exe (the
// kernel refuses a process that changed its user that link).
const shimCredEnv = "JOBPLANE_EXEC_SHIM_CRED"

// shimArg0 is the shim's argv[0], so ps shows what the process is.
const shimArg0 = "jobplane-exec-shim"

// shimStatusFD is where the shim writes the command's end, one line:
// "exit N", "signal N", or "start ERROR" when the command did not start.
const shimStatusFD = 3

func init() {
	// The moby reexec pattern: costs one environment lookup in every other
	// process.
	if parent, ok := os.LookupEnv(shimEnv); ok {
		os.Exit(runShim(parent, os.Args[1:]))
	}
}

// startGroup starts cmd under the shim, the leader of a new process group,
// and waits for it in the background. The group is killed when the shim
// exits, before the shim is reaped, so the group id cannot name another
// group yet.
func startGroup(cmd *exec.Cmd) (*group, error) {
	if cmd.Err != nil {
		return nil, cmd.Err // the command was not found; nothing to start
	}
	statusR, statusW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("exec: status pipe: %w", err)
	}
	env := cmd.Env
	if env == nil {
		env = os.Environ()
	}
	cmd.Env = append(slices.Clip(env), shimEnv+"="+strconv.Itoa(os.Getpid()))
	if cred := credentialOf(cmd); cred != nil {
		cmd.Env = append(cmd.Env, fmt.Sprintf("%s=%d:%d", shimCredEnv, cred.Uid, cred.Gid))
	}
	cmd.Args = append([]string{shimArg0, cmd.Path}, cmd.Args...)
	// /proc/self/exe still works when the binary was replaced or deleted
	// on disk since it started, where os.Executable's path would not.
	cmd.Path = "/proc/self/exe"
	cmd.ExtraFiles = []*os.File{statusW}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}

	g := &group{done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// Pdeathsig fires when the thread that forked the child ends, not
		// the process (golang/go#27505); a locked thread lives until it is
		// unlocked, so the shim hears only of the process's death. The
		// shim also checks getppid, so a stray signal would do no harm.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		err := cmd.Start()
		statusW.Close()
		if err != nil {
			statusR.Close()
			started <- err
			return
		}
		g.pgid = cmd.Process.Pid
		started <- nil
		if waitExited(g.pgid) == nil {
			g.leaderExited()
		}
		werr := cmd.Wait()
		g.leaderExited() // only if waitExited failed: late, but better than never
		status, _ := io.ReadAll(statusR)
		statusR.Close()
		g.err = shimResult(string(status), werr)
		close(g.done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return g, nil
}

// waitExited blocks until the child pid has exited, leaving it unreaped
// (waitid with WNOWAIT): a zombie keeps its pid, and so its group id,
// reserved.
func waitExited(pid int) error {
	const pPID = 1     // P_PID in <sys/wait.h>
	var info [128]byte // a siginfo_t, which nobody reads
	for {
		_, _, errno := syscall.Syscall6(syscall.SYS_WAITID, pPID, uintptr(pid),
			uintptr(unsafe.Pointer(&info)), syscall.WEXITED|syscall.WNOWAIT, 0, 0)
		switch errno {
		case 0:
			return nil
		case syscall.EINTR:
		default:
			return errno
		}
	}
}

// shimResult turns the shim's status line into the command's result. With
// no status the shim itself was killed (by a cancel, or from outside), and
// its own end is the result.
func shimResult(status string, shimErr error) error {
	verb, arg, _ := strings.Cut(status, " ")
	n, _ := strconv.Atoi(arg)
	switch verb {
	case "exit":
		if n == 0 {
			return nil
		}
		return &exitStatus{code: n}
	case "signal":
		return &exitStatus{signal: syscall.Signal(n)}
	case "start":
		return errors.New(arg)
	}
	if shimErr == nil {
		return errors.New("exec: the shim ended without reporting the command's end")
	}
	return shimErr
}

// exitStatus is how a command that failed ended, as the shim saw it.
type exitStatus struct {
	code   int
	signal syscall.Signal
}

// Error says it as os.ProcessState does, so messages read as they did
// before the shim.
func (e *exitStatus) Error() string {
	if e.signal != 0 {
		return "signal: " + e.signal.String()
	}
	return "exit status " + strconv.Itoa(e.code)
}

// runShim is the shim's main: args are the command's path and argv, parent
// the pid of the TaskExecutor that started it. It returns only when it
// could not kill its group; normally it dies by its own SIGKILL.
func runShim(parent string, args []string) int {
	ppid, err := strconv.Atoi(parent)
	pid := os.Getpid()
	// Leading its own group is what makes killing the group safe: a shim
	// started by hand (the variable leaked into a shell) would otherwise
	// kill its caller's group.
	if err != nil || len(args) < 2 || syscall.Getpgrp() != pid {
		fmt.Fprintf(os.Stderr, "%s: started with %s=%q but not by a TaskExecutor\n", shimArg0, shimEnv, parent)
		return 127
	}
	syscall.CloseOnExec(shimStatusFD) // the command must not hold the status pipe open
	status := os.NewFile(shimStatusFD, "status")

	// Pdeathsig delivers SIGTERM when the parent dies; a canceled task's
	// SIGTERM to the group reaches us too, and is the command's to handle.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM)
	parentGone := func() bool { return os.Getppid() != ppid }
	killGroup := func() int {
		// The kernel acts on a SIGKILL to ourselves before kill returns to
		// user space; the code is for the impossible case.
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		return 128 + int(syscall.SIGKILL)
	}
	// The parent may have died before Notify: its SIGTERM then killed us
	// already, or it died before Pdeathsig was set and the Go runtime
	// signaled us in the child, or it is gone and we see it here.
	if parentGone() {
		return killGroup()
	}

	cmd := &exec.Cmd{
		Path: args[0], Args: args[1:], Env: withoutShimEnv(os.Environ()),
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
		// The command stays in our group. Pdeathsig covers the shim being
		// SIGKILLed on its own; the TaskExecutor then kills the group.
		// The kernel sets it after the credential, which would clear it.
		SysProcAttr: &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
	}
	if cred, ok := os.LookupEnv(shimCredEnv); ok {
		var uid, gid uint32
		if _, err := fmt.Sscanf(cred, "%d:%d", &uid, &gid); err != nil {
			fmt.Fprintf(status, "start exec: the shim's credential %q: %v", cred, err)
			return killGroup()
		}
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}}
	}
	started := make(chan error, 1)
	exited := make(chan struct{})
	go func() {
		runtime.LockOSThread() // never unlocked: see startGroup
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = cmd.Wait()
		close(exited)
	}()
	if err := <-started; err != nil {
		fmt.Fprintf(status, "start %v", err)
		return killGroup()
	}
	for {
		select {
		case <-sigs:
			// A SIGTERM that came before the command started waited in
			// sigs, so a parent that died meanwhile is seen here.
			if parentGone() {
				return killGroup()
			}
		case <-exited:
			ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
			if ws.Signaled() {
				fmt.Fprintf(status, "signal %d", int(ws.Signal()))
			} else {
				fmt.Fprintf(status, "exit %d", ws.ExitStatus())
			}
			return killGroup()
		}
	}
}

// withoutShimEnv drops shimEnv and shimCredEnv, so a command that is itself a program
// linking this package runs normally.
func withoutShimEnv(env []string) []string {
	return slices.DeleteFunc(env, func(kv string) bool {
		return strings.HasPrefix(kv, shimEnv+"=") || strings.HasPrefix(kv, shimCredEnv+"=")
	})
}

//go:build unix

package taskexecutor

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// runCommand runs cmd in a process group of its own (see startGroup) and
// returns its result; its output goes to cmd.Stdout and cmd.Stderr. When ctx is
// canceled the whole group gets SIGTERM, and SIGKILL if the direct child
// has not exited within grace. Whatever ends the command, no process of
// the group is left when runCommand returns, except one that left the
// group itself (setsid).
func runCommand(ctx context.Context, cmd *exec.Cmd, grace time.Duration) error {
	cmd.WaitDelay = outputWaitDelay
	g, err := startGroup(cmd)
	if err != nil {
		return err
	}
	select {
	case <-g.done:
	case <-ctx.Done():
		g.signal(syscall.SIGTERM)
		timer := time.NewTimer(grace)
		defer timer.Stop()
		select {
		case <-g.done:
		case <-timer.C:
			g.signal(syscall.SIGKILL)
			<-g.done
		}
	}
	// g.done was closed after cmd.Wait returned, so the output is complete.
	return g.err
}

// group is a running process group whose leader is this process's child.
type group struct {
	pgid int
	// done is closed once the leader is reaped and the group killed; err
	// is then the command's result.
	done chan struct{}
	err  error

	mu sync.Mutex
	// reaped is set once the leader may have been reaped: from then on
	// the group id can be reused by an unrelated group once the last
	// member is gone, so it must not be signaled any more.
	reaped bool
}

// signal sends sig to every process of the group, unless it is gone.
func (g *group) signal(sig syscall.Signal) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.reaped {
		// ESRCH only means the group is already empty.
		_ = syscall.Kill(-g.pgid, sig)
	}
}

// leaderExited kills what is left of the group once its leader exited,
// and from then on signals it no more: the leader is about to be reaped,
// or already was.
func (g *group) leaderExited() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.reaped {
		// ESRCH only means the group is already empty.
		_ = syscall.Kill(-g.pgid, syscall.SIGKILL)
	}
	g.reaped = true
}

// ExecPath is the PATH an exec command gets unless the task's env or
// ExecConfig.PassEnv says otherwise.
const ExecPath = "/usr/local/bin:/usr/bin:/bin"

// baseEnv is the environment every exec command starts from.
func baseEnv(home, tmp string) []string {
	return []string{"PATH=" + ExecPath, "HOME=" + home, "TMPDIR=" + tmp}
}

// checkCredential refuses a credential that a process running with
// effective user id euid cannot switch to: only root may start a process
// as another user or group, or drop its supplementary groups.
func checkCredential(c *ExecCredential, euid int) error {
	if euid != 0 {
		return fmt.Errorf("taskexecutor: exec: running commands as uid %d, gid %d needs a TaskExecutor running as root (it runs as uid %d)", c.UID, c.GID, euid)
	}
	return nil
}

// setCredential makes cmd run as c; startGroup keeps it.
func setCredential(cmd *exec.Cmd, c *ExecCredential) {
	if c == nil {
		return
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Credential = &syscall.Credential{Uid: c.UID, Gid: c.GID, Groups: []uint32{}}
}

// credentialOf is the credential set on cmd, if any.
func credentialOf(cmd *exec.Cmd) *syscall.Credential {
	if cmd.SysProcAttr == nil {
		return nil
	}
	return cmd.SysProcAttr.Credential
}

// openNoFollow opens path for reading, refusing a symbolic link: a
// command running as another user must not make the TaskExecutor read a
// file it may not.
func openNoFollow(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
}

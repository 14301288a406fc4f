//go:build unix && !linux

package taskexecutor

import (
	"os/exec"
	"syscall"
)

// startGroup starts cmd as the leader of a new process group and waits for
// it in the background. Without Linux's Pdeathsig nothing here outlives a
// killed TaskExecutor to kill the group, so it then keeps running; a cancel
// and the command's end do kill it.
func startGroup(cmd *exec.Cmd) (*group, error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: credentialOf(cmd)}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	g := &group{pgid: cmd.Process.Pid, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		// Killed after reaping, as there is no portable wait that leaves
		// the leader a zombie: the group id stays reserved while any
		// member lives, so the kill reaches them; only an empty group's id
		// could have been taken by a new group in between.
		g.leaderExited()
		g.err = err
		close(g.done)
	}()
	return g, nil
}

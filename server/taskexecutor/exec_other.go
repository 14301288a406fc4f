//go:build !unix

package taskexecutor

import (
	"context"
	"os/exec"
	"time"
)

// runCommand runs cmd and returns its result; its output goes to
// cmd.Stdout and cmd.Stderr. Without process groups, a cancel kills only the direct child
// (exec.CommandContext's default), so its own children may outlive the
// task, and nothing outlives a killed TaskExecutor to kill the command.
// grace bounds the wait for the output once the child is gone.
func runCommand(ctx context.Context, cmd *exec.Cmd, grace time.Duration) error {
	c := exec.CommandContext(ctx, cmd.Path)
	c.Args, c.Env, c.Err = cmd.Args, cmd.Env, cmd.Err
	c.Stdout, c.Stderr = cmd.Stdout, cmd.Stderr
	c.WaitDelay = max(grace, outputWaitDelay)
	return c.Run()
}

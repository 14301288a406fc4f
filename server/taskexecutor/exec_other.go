//go:build !unix

package taskexecutor

import (
	"context"
	"os/exec"
	"time"
)

// runCommand runs cmd and returns its combined stdout and stderr with its
// result. Without process groups, a cancel kills only the direct child
// (exec.CommandContext's default), so its own children may outlive the
// task, and nothing outlives a killed TaskExecutor to kill the command.
// grace bounds the wait for the output once the child is gone.
func runCommand(ctx context.Context, cmd *exec.Cmd, grace time.Duration) ([]byte, error) {
	c := exec.CommandContext(ctx, cmd.Path)
	c.Args, c.Env, c.Err = cmd.Args, cmd.Env, cmd.Err
	c.WaitDelay = max(grace, outputWaitDelay)
	return c.CombinedOutput()
}

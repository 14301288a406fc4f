//go:build !unix

package taskexecutor

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"time"
)

// runCommand runs cmd and returns its result; its output goes to
// cmd.Stdout and cmd.Stderr. Without process groups, a cancel kills only the direct child
// (exec.CommandContext's default), so its own children may outlive the
// task, and nothing outlives a killed TaskExecutor to kill the command.
// grace bounds the wait for the output once the child is gone.
func runCommand(ctx context.Context, cmd *exec.Cmd, grace time.Duration) error {
	c := exec.CommandContext(ctx, cmd.Path)
	c.Args, c.Env, c.Err, c.Dir = cmd.Args, cmd.Env, cmd.Err, cmd.Dir
	c.Stdout, c.Stderr = cmd.Stdout, cmd.Stderr
	c.WaitDelay = max(grace, outputWaitDelay)
	return c.Run()
}

// ExecPath is empty here: an exec command gets the TaskExecutor's PATH
// (and SystemRoot), which programs on this platform need to start.
const ExecPath = ""

// baseEnv is the environment every exec command starts from.
func baseEnv(home, tmp string) []string {
	env := []string{"HOME=" + home, "USERPROFILE=" + home, "TMPDIR=" + tmp, "TMP=" + tmp, "TEMP=" + tmp}
	for _, name := range []string{"PATH", "SystemRoot", "SYSTEMROOT", "ComSpec", "PATHEXT"} {
		if v, ok := os.LookupEnv(name); ok {
			env = append(env, name+"="+v)
		}
	}
	return env
}

// checkCredential refuses every credential: this platform cannot start
// a process as another user.
func checkCredential(c *ExecCredential, _ int) error {
	return fmt.Errorf("taskexecutor: exec: running commands as uid %d, gid %d is not supported on %s", c.UID, c.GID, runtime.GOOS)
}

// setCredential does nothing: checkCredential refused every credential.
func setCredential(*exec.Cmd, *ExecCredential) {}

// openNoFollow opens path for reading (symbolic links are followed here).
func openNoFollow(path string) (*os.File, error) { return os.Open(path) }

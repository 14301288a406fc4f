package cli

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// The client verbs are tested as a user runs them: the real jobplane
// binary against a `jobplane standalone` child process. Package cli cannot
// build that binary itself (its main links the server), so the tests
// build it once per test binary, or take the one $JOBPLANE_BIN names
// ($JOBPLANE_RACE_BIN when this test binary is race-detected).

// binEnv and raceBinEnv name the environment variables that give a
// jobplane binary to use instead of building one: a race-detected one
// for a race-detected test binary.
const (
	binEnv     = "JOBPLANE_BIN"
	raceBinEnv = "JOBPLANE_RACE_BIN"
)

// jobplanePackage is the import path of the jobplane binary's main
// package.
const jobplanePackage = "github.com/jobplane/jobplane/server/cmd/jobplane"

// raceBuild is the go build flag that makes the jobplane binary
// race-detected, set (race_test.go) when this test binary is: the verbs'
// goroutines are checked in the child as in the test.
var raceBuild []string

var build struct {
	once sync.Once
	dir  string
	path string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if build.dir != "" {
		os.RemoveAll(build.dir)
	}
	os.Exit(code)
}

// jobplaneBinary returns the path of the jobplane binary: $JOBPLANE_BIN
// (or $JOBPLANE_RACE_BIN), or one built on first use into a temporary
// directory that TestMain removes. It fails the test if the build fails.
func jobplaneBinary(t testing.TB) string {
	t.Helper()
	env := binEnv
	if raceBuild != nil {
		env = raceBinEnv
	}
	if bin := os.Getenv(env); bin != "" {
		return bin
	}
	build.once.Do(func() {
		if build.dir, build.err = os.MkdirTemp("", "cli-test-"); build.err != nil {
			return
		}
		build.path = filepath.Join(build.dir, "jobplane")
		args := append(append([]string{"build"}, raceBuild...), "-o", build.path, jobplanePackage)
		if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
			build.err = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	})
	if build.err != nil {
		t.Fatal(build.err)
	}
	return build.path
}

// process is a jobplane child process.
type process struct {
	cmd    *exec.Cmd
	stderr *syncBuffer
	done   chan error
}

// startJobplane starts `jobplane args...` as a child process and kills it,
// if still running, when the test ends; its standard error is logged if
// the test failed.
func startJobplane(t *testing.T, args ...string) *process {
	t.Helper()
	cmd := exec.Command(jobplaneBinary(t), args...)
	// TMPDIR: what a killed child leaves in its temp directory (exec
	// tasks' directories) goes with the test.
	cmd.Env = append(os.Environ(), "TMPDIR="+t.TempDir())
	p := &process{cmd: cmd, stderr: &syncBuffer{}, done: make(chan error, 1)}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start jobplane: %v", err)
	}
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("jobplane stderr:\n%s", p.stderr)
		}
	})
	return p
}

// waitForFile polls for a non-empty file written by the child, bounded by a
// deadline, and returns its trimmed content.
func waitForFile(t *testing.T, p *process, name string) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(name); err == nil && len(b) > 0 {
			return strings.TrimSpace(string(b))
		}
		select {
		case err := <-p.done:
			p.done <- err
			t.Fatalf("jobplane exited before listening: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Fatalf("no address in %s after 20s", name)
	return ""
}

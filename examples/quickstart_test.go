// Package examples_test runs the commands and snippets that the README
// and docs/ show, as written (see docs_test.go for which test runs which).
package examples_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jobplane/jobplane/server/localcluster"
)

func TestMain(m *testing.M) { os.Exit(localcluster.Main(m)) }

// The README's tour: its CLI steps, run in one shell against a standalone
// server started as its server step says (on a free port instead of 8080).
func TestQuickStart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the README's programs")
	}
	server := docBlock(t, "readme:server")
	if !strings.HasPrefix(server, "make run ") || strings.Contains(strings.SplitN(server, "#", 2)[0], "ARGS") {
		t.Fatalf("the server step changed: %q, want make run as it is; update this test", server)
	}
	// make run is jobplane standalone (its default two TaskExecutors) with
	// the flags its recipe gives, which the test starts with those flags on
	// a free port instead.
	makeRun := exec.Command("make", "-s", "-n", "--no-print-directory", "-C", "..", "run")
	// As typed in a shell: neither ARGS nor RUN_FLAGS from the environment.
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "ARGS=") || strings.HasPrefix(kv, "RUN_FLAGS=") })
	makeRun.Env = append(env, "MAKEFLAGS=", "MAKELEVEL=")
	recipe, err := makeRun.Output()
	if err != nil {
		t.Fatalf("make -n run: %v", err)
	}
	flags := runRecipe(t, string(recipe))
	cluster := localcluster.NewStandalone(t, append([]string{"--task-executors", "2"}, flags...)...)
	script := docBlock(t, "readme:tour")

	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "JOBPLANE_SERVER="+cluster.URL(), "CI=")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// The worker the script leaves running in the background holds the
	// output: once the shell exits, Wait gives up on it after this.
	cmd.WaitDelay = 2 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Start()
	if err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	// The worker the script started in the background goes with its group.
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	if errors.Is(err, exec.ErrWaitDelay) {
		err = nil
	}
	if err != nil {
		t.Fatalf("the quick start failed: %v\n%s", err, out.String())
	}
	for _, want := range []string{
		"hello from Linux",                                         // jobplane logs of the exec job
		"0        hello from Linux",                                // jobplane result of the exec job: subtask 0's value
		"exit code 4: CANCELED",                                    // jobplane wait of the canceled job
		"JOB_STATUS_FINISHED",                                      // examples/hello
		"hello jobplane from subtask",                              // the worker ran greet
		"ok  \tgithub.com/jobplane/jobplane/examples/localcluster", // go test
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the quick start's output lacks %q:\n%s", want, out.String())
		}
	}
	if n := strings.Count(out.String(), "FINISHED"); n < 4 {
		t.Errorf("%d jobs reported FINISHED, want at least 4 (pipeline, exec, hello, greet):\n%s", n, out.String())
	}
}

// The Go program the README shows is examples/hello's, line for line.
func TestReadmeShowsExamplesHello(t *testing.T) {
	shown := docBlock(t, "readme:hello")
	src, err := os.ReadFile("hello/main.go")
	if err != nil {
		t.Fatal(err)
	}
	body := strings.ReplaceAll(string(src), "\n\t", "\n")
	if !strings.Contains(body, shown) {
		t.Fatalf("README's program is not examples/hello/main.go's main body:\n%s", shown)
	}
}

// runRecipe checks make run's recipe (as make -n prints it) and returns
// the flags it starts the standalone with. make run says what it does
// before it builds (the first build compiles for minutes), builds with
// -v so that each package compiled is named, and then runs the binary it
// built: jobplane standalone.
func runRecipe(t *testing.T, recipe string) []string {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(recipe), "\n")
	const build, run = "go build -v -o bin/jobplane ./server/cmd/jobplane", "exec bin/jobplane standalone"
	b := slices.Index(lines, build)
	if b < 1 || !strings.HasPrefix(lines[b-1], "echo ") || !strings.Contains(lines[b-1], "build") {
		t.Fatalf("make run does not say that it builds before %q:\n%s", build, recipe)
	}
	last := strings.TrimSpace(lines[len(lines)-1])
	if !strings.HasPrefix(last, run) {
		t.Fatalf("make run no longer ends with %q:\n%s; update this test", run, recipe)
	}
	return strings.Fields(strings.TrimPrefix(last, run))
}

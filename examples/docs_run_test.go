package examples_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jobplane/jobplane/server/localcluster"
	"github.com/jobplane/jobplane/server/localcluster/freeport"
)

// jobplanePath returns PATH with the jobplane binary's directory first, as
// `make build && export PATH=$PWD/bin:$PATH` leaves it.
func jobplanePath(t *testing.T) string {
	t.Helper()
	bin, err := localcluster.JobplaneBinary()
	if err != nil {
		t.Fatal(err)
	}
	return "PATH=" + filepath.Dir(bin) + string(os.PathListSeparator) + os.Getenv("PATH")
}

// docs/clients.md's tour of the CLI, run in one shell as written against a
// standalone server.
func TestDocsCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the docs' commands against a server process")
	}
	cluster := localcluster.NewStandalone(t, "--task-executors", "2")
	cluster.WaitTaskExecutor(t, "sleep")
	out := runDoc(t, docBlock(t, "clients:cli"), cluster.URL(), jobplanePath(t))
	wantAll(t, "clients:cli", out,
		"nightly",                            // submit -d prints the id
		"Exception",                          // status shows the failed first attempt
		"flaky: failed on its first attempt", // ... and its message
		"job_id: forever",                    // list -o yaml
		"JOB_STATUS_CANCELED",
	)
	if n := strings.Count(out, "FINISHED"); n < 2 {
		t.Errorf("clients:cli: %d FINISHED in the output, want the pipeline's and nightly's:\n%s", n, out)
	}
}

// docs/clients.md's id reuse commands: a cancel with a reason shown in
// the status, a purge, and a job id run twice with id reuse allowed.
func TestDocsIDReuse(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the docs' commands against a server process")
	}
	cluster := localcluster.NewStandalone(t, "--task-executors", "2")
	cluster.WaitTaskExecutor(t, "sleep")
	out := runDoc(t, docBlock(t, "clients:reuse"), cluster.URL(), jobplanePath(t))
	wantAll(t, "clients:reuse", out,
		"superseded by nightly-2", // status shows the cancel's reason
		"job nightly-1 purged",
	)
	// The second submission runs the job again rather than answer the
	// first run's result.
	if n := strings.Count(out, "job daily RUNNING"); n < 2 {
		t.Errorf("clients:reuse: daily RUNNING %d times in the output, want once for each of its two runs:\n%s", n, out)
	}
}

// docs/clients.md's checkpoint commands: the example resumes from a
// checkpoint after its failure, and a job stopped with a savepoint goes
// on from it in a new job.
func TestDocsCheckpoints(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the docs' commands against a server process")
	}
	cluster := localcluster.NewStandalone(t, "--task-executors", "2")
	cluster.WaitTaskExecutor(t, "count")
	out := runDoc(t, docBlock(t, "clients:checkpoints"), cluster.URL(), jobplanePath(t))
	wantAll(t, "clients:checkpoints", out,
		"job counter FINISHED",      // submit follows it to its end
		"restored from checkpoint ", // status after the restart
		"ID  TRIGGERED  ",           // checkpoints lists the kept ones
		"job counter2 was stopped",  // savepoint --stop
		"job counter3 FINISHED",     // restored from the savepoint
		"sp-counter2-",              // savepoints lists it
		" deleted",
	)
}

// docs/clients.md's curl calls: submit, wait for the result, read a
// subtask's output.
func TestDocsCurl(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the docs' commands against a server process")
	}
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("the docs' commands need curl")
	}
	// As make run: two TaskExecutors of 4 slots, as the job's one
	// pipelined region of 5 subtasks needs.
	cluster := localcluster.NewStandalone(t, "--task-executors", "2")
	cluster.WaitTaskExecutor(t, "sleep")
	out := runDoc(t, docBlock(t, "clients:curl"), cluster.URL())
	wantAll(t, "clients:curl", out,
		`"jobId":"hello"`, `"created":true`, // SubmitJob
		`"status":"JOB_STATUS_FINISHED"`, // GetJobResult
	)
	// GetTaskOutput answers (a sleep task prints nothing), with no error.
	if strings.Contains(out, `"code":`) {
		t.Errorf("clients:curl: a call was refused:\n%s", out)
	}
}

// The Go snippets of docs/clients.md are parts of example programs that
// their tests build and run: the worker's (examples/worker, also run by
// the README's tour) and the local cluster's (examples/localcluster).
func TestDocsShowExamples(t *testing.T) {
	for marker, file := range map[string]string{
		"clients:worker":       "worker/main.go",
		"clients:localcluster": "localcluster/greet_test.go",
	} {
		shown := docBlock(t, marker)
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if body := strings.ReplaceAll(string(src), "\n\t", "\n"); !strings.Contains(body, shown) {
			t.Errorf("the snippet %s is not a part of examples/%s (one tab less indented):\n%s", marker, file, shown)
		}
	}
}

// docs/security.md's token file and policy, given to a standalone server,
// and its CLI commands run as written: alice submits with her token file,
// ci-bot may not cancel her job, ops (an admin) may.
func TestDocsAuth(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the docs' commands against a server process")
	}
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	tokensFile := filepath.Join(dir, "tokens")
	policyFile := filepath.Join(dir, "policy.yaml")
	tokens := docBlock(t, "security:tokens")
	writeFile(t, tokensFile, tokens)
	writeFile(t, policyFile, docBlock(t, "security:policy"))
	token := map[string]string{}
	for _, line := range strings.Split(tokens, "\n") {
		if f := strings.Fields(line); len(f) == 2 && !strings.HasPrefix(f[0], "#") {
			token[f[0]] = f[1]
		}
	}
	// Where the block says each token is: alice's in her default token
	// file, the others beside where the commands run.
	writeFile(t, filepath.Join(home, ".config", "jobplane", "token"), token["alice"]+"\n")
	writeFile(t, filepath.Join(dir, "ci-bot.token"), token["ci-bot"]+"\n")
	writeFile(t, filepath.Join(dir, "ops.token"), token["ops"]+"\n")
	if err := os.Symlink(mustAbs(t, "."), filepath.Join(dir, "examples")); err != nil {
		t.Fatal(err)
	}

	url := startAuthenticating(t, "--auth-token-file", tokensFile, "--auth-policy", policyFile)
	script := docBlock(t, "security:cli")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOME="+home, "JOBPLANE_SERVER="+url, jobplanePath(t),
		"JOBPLANE_TOKEN=", "JOBPLANE_TOKEN_FILE=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("security:cli failed: %v\n%s", err, out)
	}
	wantAll(t, "security:cli", string(out),
		"alice",       // status: Submitted by
		"exit code 8", // ci-bot refused
	)
	// ops's cancel took: the job ends CANCELED.
	status := exec.Command(mustBinary(t), "--server", url, "--token", token["alice"], "wait", "nightly")
	if err := status.Run(); !errors.As(err, new(*exec.ExitError)) || status.ProcessState.ExitCode() != 4 {
		t.Errorf("jobplane wait nightly after ops's cancel: %v, want exit code 4 (CANCELED)", err)
	}
}

// startAuthenticating runs `jobplane standalone` with args until the test
// ends, and returns its URL once it leads. Launch cannot wait for it: its
// calls carry no token.
func startAuthenticating(t *testing.T, args ...string) string {
	t.Helper()
	dir := t.TempDir()
	addrFile := filepath.Join(dir, "addr")
	args = append([]string{"standalone", "--listen", "127.0.0.1:0", "--listen-addr-file", addrFile,
		"--data-dir", filepath.Join(dir, "data"), "--task-executors", "1"}, args...)
	cmd := exec.Command(mustBinary(t), args...)
	var log localcluster.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("jobplane standalone log:\n%s", log.String())
		}
	})
	// Ready once the public API answers a call without a token
	// UNAUTHENTICATED and the health of the DispatcherService (open to
	// all) is SERVING: the process leads.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if b, err := os.ReadFile(addrFile); err == nil && len(b) > 0 {
			url := "http://" + strings.TrimSpace(string(b))
			if serving(url) {
				return url
			}
		}
		select {
		case err := <-done:
			done <- err
			t.Fatalf("jobplane standalone exited: %v\n%s", err, log.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("jobplane standalone did not lead within 30s\n%s", log.String())
		}
	}
}

// serving reports whether the server at url says its DispatcherService is
// SERVING, over gRPC health's Connect JSON form.
func serving(url string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/grpc.health.v1.Health/Check",
		strings.NewReader(`{"service": "jobplane.v1.DispatcherService"}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var body bytes.Buffer
	_, _ = body.ReadFrom(resp.Body)
	return strings.Contains(body.String(), `"status":"SERVING_STATUS_SERVING"`)
}

// docs/operations.md's profiler command, run as written against a
// standalone server started with the --debug-listen the text names (on a
// free port instead of 6060).
func TestDocsPprof(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a server process")
	}
	port, err := freeport.Port()
	if err != nil {
		t.Fatal(err)
	}
	debug := fmt.Sprintf("127.0.0.1:%d", port)
	localcluster.NewStandalone(t, "--debug-listen", debug)
	script := strings.ReplaceAll(docBlock(t, "ops:pprof"), "127.0.0.1:6060", debug)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script).CombinedOutput()
	if err != nil {
		t.Fatalf("ops:pprof failed: %v\n%s", err, out)
	}
	wantAll(t, "ops:pprof", string(out), "flat%")
}

func mustBinary(t *testing.T) string {
	t.Helper()
	bin, err := localcluster.JobplaneBinary()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

func mustAbs(t *testing.T, path string) string {
	t.Helper()
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

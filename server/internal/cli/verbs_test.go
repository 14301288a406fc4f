package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"buf.build/go/protoyaml"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
)

// cliCluster is a `jobplane standalone` process for the client verbs,
// and the jobplane binary that runs them.
type cliCluster struct {
	url string
	bin string
}

// unreachable is a cliCluster whose server nothing listens at.
func unreachable(t *testing.T) *cliCluster {
	return &cliCluster{url: "http://127.0.0.1:1", bin: jobplaneBinary(t)}
}

// startCLICluster starts `jobplane standalone` (exec allowed, 2
// TaskExecutors of 4 slots), with flags added, on a temporary data
// directory, and waits until
// `jobplane cluster` sees both TaskExecutors.
func startCLICluster(t *testing.T, flags ...string) *cliCluster {
	t.Helper()
	addrFile := filepath.Join(t.TempDir(), "addr")
	p := startJobplane(t, append([]string{"standalone", "--listen", "127.0.0.1:0", "--listen-addr-file", addrFile, "--data-dir", t.TempDir(),
		"--allow-exec", "--cancel-grace", "200ms"}, flags...)...)
	c := &cliCluster{url: "http://" + waitForFile(t, p, addrFile), bin: jobplaneBinary(t)}
	waitForTaskExecutors(t, func() cliResult { return c.run(t, "cluster", "-o", "json") })
	return c
}

// waitForTaskExecutors waits until `jobplane cluster -o json`, as cluster
// runs it, sees a standalone's two TaskExecutors.
func waitForTaskExecutors(t *testing.T, cluster func() cliResult) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := cluster()
		var out struct {
			TaskExecutors []any `json:"task_executors"`
		}
		if r.code == exitOK && json.Unmarshal([]byte(r.stdout), &out) == nil && len(out.TaskExecutors) == 2 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster not ready after 30s: %+v", r)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cliResult is how a client verb ended.
type cliResult struct {
	stdout, stderr string
	code           int
}

// cliTimeout bounds every client verb a test runs.
const cliTimeout = 90 * time.Second

// run runs `jobplane --server URL args...` to its end, bounded by
// cliTimeout, without a terminal.
func (c *cliCluster) run(t *testing.T, args ...string) cliResult {
	t.Helper()
	return runCommand(t, c.command(args...))
}

// runCommand runs cmd to its end, bounded by cliTimeout, and returns its
// output and exit code.
func runCommand(t *testing.T, cmd *exec.Cmd) cliResult {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	code := waitExit(t, cmd, cliTimeout)
	return cliResult{stdout: stdout.String(), stderr: stderr.String(), code: code}
}

// command is `jobplane --server URL args...`, not started.
func (c *cliCluster) command(args ...string) *exec.Cmd {
	return exec.Command(c.bin, append([]string{"--server", c.url}, args...)...)
}

// waitExit waits for a started command and returns its exit code,
// killing it and failing the test if it runs longer than within.
func waitExit(t *testing.T, cmd *exec.Cmd, within time.Duration) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return exit.ExitCode()
		}
		if err != nil {
			t.Fatalf("%v: %v", cmd.Args, err)
		}
		return 0
	case <-time.After(within):
		cmd.Process.Kill()
		<-done
		t.Fatalf("%v did not exit within %v", cmd.Args, within)
		return -1
	}
}

// writeJob writes a job file into a temporary directory.
func writeJob(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func example(name string) string { return filepath.Join("..", "..", "..", "examples", name) }

// expect checks a verb's exit code and that its stdout and stderr hold
// the given strings.
func expect(t *testing.T, what string, r cliResult, code int, stdout, stderr []string) {
	t.Helper()
	if r.code != code {
		t.Errorf("%s: exit code %d, want %d\nstdout:\n%s\nstderr:\n%s", what, r.code, code, r.stdout, r.stderr)
	}
	for _, s := range stdout {
		if !strings.Contains(r.stdout, s) {
			t.Errorf("%s: stdout lacks %q:\n%s", what, s, r.stdout)
		}
	}
	for _, s := range stderr {
		if !strings.Contains(r.stderr, s) {
			t.Errorf("%s: stderr lacks %q:\n%s", what, s, r.stderr)
		}
	}
	if strings.Contains(r.stderr, "goroutine ") || strings.Contains(r.stderr, "panic") {
		t.Errorf("%s: stderr has a stack trace:\n%s", what, r.stderr)
	}
}

// listJobs returns the cluster's jobs by id, from `jobplane list -o json`.
func (c *cliCluster) listJobs(t *testing.T, args ...string) map[string]*jobplanev1.JobSummary {
	t.Helper()
	r := c.run(t, append([]string{"list", "-o", "json"}, args...)...)
	if r.code != exitOK {
		t.Fatalf("list: %+v", r)
	}
	var resp jobplanev1.ListJobsResponse
	if err := protojson.Unmarshal([]byte(r.stdout), &resp); err != nil {
		t.Fatalf("list -o json: %v\n%s", err, r.stdout)
	}
	jobs := map[string]*jobplanev1.JobSummary{}
	for _, j := range resp.GetJobs() {
		jobs[j.GetJobId()] = j
	}
	return jobs
}

const (
	cycleJob = `name: loop
vertices:
  - {id: a, invokable: noop, parallelism: 1}
  - {id: b, invokable: noop, parallelism: 1}
edges:
  - {source_vertex_id: a, target_vertex_id: b, distribution: DISTRIBUTION_PATTERN_POINTWISE, result_type: RESULT_PARTITION_TYPE_PIPELINED}
  - {source_vertex_id: b, target_vertex_id: a, distribution: DISTRIBUTION_PATTERN_POINTWISE, result_type: RESULT_PARTITION_TYPE_PIPELINED}
`
	missingInvokableJob = "name: missing\nvertices:\n  - id: v\n    invokable: no-such-invokable\n    parallelism: 1\n"
	failingJob          = "name: failing\nvertices:\n  - id: v\n    invokable: fail\n    parallelism: 1\n    config: {message: broken on purpose}\nconfig:\n  restart_strategy: {none: {}}\n"
	// Two regions: flaky fails twice and restarts alone, steady finishes.
	regionRestartJob = `name: regions
vertices:
  - {id: flaky, invokable: fail, parallelism: 1, config: {attempts: "0,1", delay: 100ms, message: flaky region failed}}
  - {id: steady, invokable: noop, parallelism: 1}
config:
  restartStrategy: {fixedDelay: {attempts: 2, delay: 100ms}}
`
	sleepJob = "name: long\nvertices:\n  - id: nap\n    invokable: sleep\n    parallelism: 2\n    config: {duration: 2m}\n"
)

// The client verbs, run as a user runs them against `jobplane standalone`.
func TestClientVerbs(t *testing.T) {
	c := startCLICluster(t)

	t.Run("cluster", func(t *testing.T) {
		r := c.run(t, "cluster")
		expect(t, "cluster", r, exitOK, []string{"Leader:         http://127.0.0.1:", "TaskExecutors:  2", "free of 8", "TASK EXECUTOR", "noop,sleep"}, nil)
		r = c.run(t, "cluster", "-o", "yaml")
		var y struct {
			Overview struct {
				SlotCount int `yaml:"slot_count"`
			} `yaml:"overview"`
		}
		if err := yaml.Unmarshal([]byte(r.stdout), &y); err != nil || y.Overview.SlotCount != 8 {
			t.Errorf("cluster -o yaml: %v\n%s", err, r.stdout)
		}
	})

	// Bad job files: a clear message placed in the file, exit 5, nothing
	// submitted.
	t.Run("bad job files", func(t *testing.T) {
		for _, tc := range []struct {
			name, content string
			want          []string
		}{
			{"unknown-field.yaml", "name: j\nvertices:\n  - id: v\n    invokable: noop\n    paralellism: 1\n", []string{"unknown-field.yaml:5:5: unknown field \"paralellism\""}},
			{"cycle.yaml", cycleJob, []string{"cycle.yaml:5:1: job_graph.edges: the edges form a cycle"}},
			{"missing.yaml", missingInvokableJob, []string{"missing.yaml:4:5: job_graph.vertices[0].invokable: no TaskExecutor of the cluster offers invokable \"no-such-invokable\"", "nothing was submitted"}},
			{"prose.txt", "Dear cluster, please run my job.\n", []string{"prose.txt:1:1: not a JobGraph"}},
			{"broken.json", `{"name": "x", "vertices": [}`, []string{"broken.json:1:28: not valid JSON"}},
		} {
			r := c.run(t, "submit", writeJob(t, tc.name, tc.content))
			expect(t, tc.name, r, exitInvalidJob, nil, tc.want)
		}
		r := c.run(t, "submit", filepath.Join(t.TempDir(), "absent.yaml"))
		expect(t, "absent file", r, exitInvalidJob, nil, []string{"cannot read the job file", "absent.yaml"})
		if jobs := c.listJobs(t); len(jobs) != 0 {
			t.Errorf("jobs after bad submissions: %v", jobs)
		}
	})

	t.Run("usage", func(t *testing.T) {
		expect(t, "submit without a file", c.run(t, "submit"), exitUsage, nil, []string{"accepts 1 arg"})
		expect(t, "bad output", c.run(t, "list", "-o", "xml"), exitUsage, nil, []string{`--output "xml"`})
		expect(t, "bad status", c.run(t, "list", "--status", "sleepy"), exitUsage, nil, []string{`--status "sleepy"`})
		expect(t, "bad id", c.run(t, "submit", "--id", "no spaces", example("pipeline.yaml")), exitUsage, nil, []string{`--id "no spaces"`})
	})

	// Attached, without a terminal: one line per status change, then the
	// result; the exit code is the job's.
	t.Run("submit attached", func(t *testing.T) {
		for _, tc := range []struct {
			file string
			want []string
		}{
			{"pipeline.yaml", []string{" RUNNING ", "FINISHED after"}},
			{"restart.yaml", []string{" RUNNING ", " RESTARTING ", "flaky: failed on its first attempt", "FINISHED after", "(1 restart)"}},
			{"exec.yaml", []string{"FINISHED after"}},
		} {
			r := c.run(t, "submit", "--id", "attached-"+strings.TrimSuffix(tc.file, ".yaml"), example(tc.file))
			expect(t, tc.file, r, exitOK, tc.want, nil)
			if strings.Contains(r.stdout, "\x1b[") {
				t.Errorf("%s: escape sequences without a terminal:\n%q", tc.file, r.stdout)
			}
		}
	})

	// A restart of one region leaves the job RUNNING: the attached view
	// says so as it happens, with the failure, and status shows it.
	t.Run("submit attached, region restarts", func(t *testing.T) {
		r := c.run(t, "submit", "--id", "regions", writeJob(t, "regions.yaml", regionRestartJob))
		expect(t, "regions.yaml", r, exitOK, []string{" RUNNING ", "RUNNING  restarted 2 times; last failure: flaky region failed (vertex flaky, subtask 0, attempt 1",
			"FINISHED after", "(2 restarts)"}, nil)
		if strings.Contains(r.stdout, " RESTARTING ") {
			t.Errorf("a region restart shown as a job status change:\n%s", r.stdout)
		}
		expect(t, "status regions", c.run(t, "status", "regions"), exitOK, []string{"Restarts:   2", "flaky region failed"}, nil)
	})

	t.Run("submit detached, wait, status", func(t *testing.T) {
		for _, file := range []string{"pipeline.yaml", "restart.yaml", "exec.yaml"} {
			id := "detached-" + strings.TrimSuffix(file, ".yaml")
			r := c.run(t, "submit", "-d", "--id", id, example(file))
			expect(t, "submit -d "+file, r, exitOK, nil, []string{"job " + id + " submitted"})
			if r.stdout != id+"\n" {
				t.Errorf("submit -d stdout = %q, want the id alone", r.stdout)
			}
			expect(t, "wait "+id, c.run(t, "wait", id), exitOK, []string{"job " + id + " FINISHED"}, nil)
		}
		r := c.run(t, "status", "detached-pipeline")
		// The leader still keeps the ended job's vertices and subtasks.
		expect(t, "status", r, exitOK, []string{"Status:     FINISHED", "Duration:", "Subtasks:   5 finished",
			"VERTEX     NAME       PARALLELISM  STATE     SUBTASKS", "load       Load       1            FINISHED  1 finished",
			"VERTEX     SUBTASK  ATTEMPT  STATE     TASK EXECUTOR", "transform  1        0        FINISHED  te-"}, nil)
		if strings.Contains(r.stdout, "no longer keeps") {
			t.Errorf("status of a job whose vertices are kept says they are not:\n%s", r.stdout)
		}
		r = c.run(t, "status", "detached-restart")
		expect(t, "status", r, exitOK, []string{"Restarts:   1", "Exception history", "flaky: failed on its first attempt"}, nil)
		r = c.run(t, "status", "detached-restart", "-o", "json")
		var d jobplanev1.JobDetails
		if err := protojson.Unmarshal([]byte(r.stdout), &d); err != nil || d.GetSummary().GetRestartCount() != 1 || d.GetSummary().GetName() != "restart" {
			t.Errorf("status -o json: %v\n%s", err, r.stdout)
		}
		// The same id and graph again is the same job, not a second run.
		r = c.run(t, "submit", "-d", "--id", "detached-pipeline", example("pipeline.yaml"))
		expect(t, "resubmit", r, exitOK, nil, []string{"exists already"})
	})

	t.Run("failing job", func(t *testing.T) {
		r := c.run(t, "submit", "--id", "failing", writeJob(t, "failing.yaml", failingJob))
		expect(t, "failing", r, exitJobFailed, []string{"job failing FAILED", "broken on purpose"}, nil)
		// Past the command's own check, the cluster refuses the job, and
		// its answer is placed in the file as the check's would be.
		r = c.run(t, "submit", "--skip-invokable-check", "--id", "missing", writeJob(t, "missing.yaml", missingInvokableJob))
		expect(t, "missing invokable", r, exitInvalidJob, nil, []string{"the cluster refused the job: no registered TaskExecutor offers its invokables; nothing was submitted:",
			"missing.yaml:4:5: job_graph.vertices[0].invokable: no registered TaskExecutor offers invokable \"no-such-invokable\"\n    4 |     invokable: no-such-invokable\n      |     ^",
			"the cluster's TaskExecutors offer: count, exec, fail, noop, sleep;"})
		if strings.Contains(r.stderr, "may or may not have been persisted") {
			t.Errorf("a refused job is said to be perhaps persisted:\n%s", r.stderr)
		}
		expect(t, "wait failing", c.run(t, "wait", "failing"), exitJobFailed, []string{"FAILED"}, nil)
		expect(t, "cancel an ended job", c.run(t, "cancel", "failing"), exitError, nil, []string{"job failing has ended already (FAILED); there is nothing to cancel"})
	})

	t.Run("cancel", func(t *testing.T) {
		job := writeJob(t, "sleep.yaml", sleepJob)
		expect(t, "submit", c.run(t, "submit", "-d", "--id", "to-cancel", job), exitOK, nil, nil)
		// While it runs, status shows its vertex and each subtask.
		var r cliResult
		for deadline := time.Now().Add(60 * time.Second); ; {
			r = c.run(t, "status", "to-cancel")
			if strings.Contains(r.stdout, "Subtasks:   2 running") || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		expect(t, "status", r, exitOK, []string{"Status:     RUNNING", "Subtasks:   2 running",
			"nap     -     2            RUNNING  2 running", "nap     0        0        RUNNING  te-", "nap     1        0        RUNNING  te-"}, nil)
		expect(t, "purge a running job", c.run(t, "purge", "to-cancel"), exitError, nil, []string{"job to-cancel has not ended; cancel it first"})
		expect(t, "cancel", c.run(t, "cancel", "--reason", "superseded by nightly-2", "--request-id", "req-1", "to-cancel"), exitOK, []string{"job to-cancel CANCEL"}, nil)
		expect(t, "cancel again", c.run(t, "cancel", "--reason", "another reason", "to-cancel"), exitOK, nil, nil)
		expect(t, "wait", c.run(t, "wait", "to-cancel"), exitJobCanceled, []string{"job to-cancel CANCELED"}, nil)
		expect(t, "status of the canceled job", c.run(t, "status", "to-cancel"), exitOK, []string{"Run:", `Cancel request:  "superseded by nightly-2", id req-1, at `}, nil)
		expect(t, "result of the canceled job", c.run(t, "result", "to-cancel"), exitJobCanceled, []string{"run ", `cancel request: "superseded by nightly-2", id req-1`}, nil)
		expect(t, "cancel another run", c.run(t, "cancel", "--run", "no-such-run", "to-cancel"), exitError, nil, []string{"job to-cancel has no run no-such-run"})
		// The ended job's id runs again once its result is purged, or
		// with --id-reuse allow-duplicate.
		expect(t, "resubmit", c.run(t, "submit", "-d", "--id", "to-cancel", job), exitOK, nil, []string{"exists already with the same graph (CANCELED)"})
		expect(t, "resubmit allowing reuse", c.run(t, "submit", "-d", "--id-reuse", "allow-duplicate", "--id", "to-cancel", job), exitOK, nil, []string{"job to-cancel submitted"})
		expect(t, "cancel the second run", c.run(t, "cancel", "to-cancel"), exitOK, nil, nil)
		expect(t, "wait for the second run", c.run(t, "wait", "to-cancel"), exitJobCanceled, nil, nil)
		for deadline := time.Now().Add(20 * time.Second); ; {
			r = c.run(t, "purge", "to-cancel")
			if r.code == exitOK || !strings.Contains(r.stderr, "cleanup is not done yet") || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		expect(t, "purge", r, exitOK, []string{"job to-cancel purged"}, nil)
		expect(t, "status after purge", c.run(t, "status", "to-cancel"), exitError, nil, nil)
		// A third run, canceled as the later subtests expect the job.
		expect(t, "submit after purge", c.run(t, "submit", "-d", "--id", "to-cancel", job), exitOK, nil, []string{"job to-cancel submitted"})
		expect(t, "cancel the third run", c.run(t, "cancel", "to-cancel"), exitOK, nil, nil)
		expect(t, "wait for the third run", c.run(t, "wait", "to-cancel"), exitJobCanceled, nil, nil)
		expect(t, "bad --id-reuse", c.run(t, "submit", "-d", "--id-reuse", "sometimes", job), exitUsage, nil, []string{"--id-reuse"})
	})

	// Without a terminal, SIGINT detaches; the job goes on.
	t.Run("SIGINT detaches", func(t *testing.T) {
		cmd := c.command("submit", "--id", "interrupted", writeJob(t, "sleep.yaml", sleepJob))
		out := &syncBuffer{}
		var stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = out, &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if !out.waitFor(" RUNNING ", 60*time.Second) {
			cmd.Process.Kill()
			t.Fatalf("no RUNNING line:\n%s", out.String())
		}
		cmd.Process.Signal(syscall.SIGINT)
		code := waitExit(t, cmd, 30*time.Second)
		expect(t, "interrupted submit", cliResult{out.String(), stderr.String(), code}, exitDetached, nil, []string{"detached from job interrupted"})
		if st := c.listJobs(t)["interrupted"].GetStatus(); terminal(st) {
			t.Errorf("job after detaching: %v, want it going on", st)
		}
		expect(t, "cancel", c.run(t, "cancel", "interrupted"), exitOK, nil, nil)
	})

	t.Run("list", func(t *testing.T) {
		r := c.run(t, "list")
		expect(t, "list", r, exitOK, []string{"JOB ID", "attached-pipeline", "detached-exec", "failing", "to-cancel"}, nil)
		jobs := c.listJobs(t, "--status", "failed,canceled")
		for id, j := range jobs {
			if st := j.GetStatus(); st != jobplanev1.JobStatus_JOB_STATUS_FAILED && st != jobplanev1.JobStatus_JOB_STATUS_CANCELED {
				t.Errorf("list --status failed,canceled: %s is %v", id, st)
			}
		}
		if jobs["failing"] == nil || jobs["to-cancel"] == nil || jobs["attached-pipeline"] != nil {
			t.Errorf("list --status failed,canceled = %v", jobs)
		}
		r = c.run(t, "list", "-o", "yaml")
		var resp jobplanev1.ListJobsResponse
		if err := protoyaml.Unmarshal([]byte(r.stdout), &resp); err != nil || len(resp.GetJobs()) < 9 {
			t.Errorf("list -o yaml: %d jobs, %v\n%s", len(resp.GetJobs()), err, r.stdout)
		}
	})

	t.Run("scripting", func(t *testing.T) {
		r := c.run(t, "submit", "-o", "json", "--id", "json-pipeline", example("pipeline.yaml"))
		var result jobplanev1.JobResult
		if err := protojson.Unmarshal([]byte(r.stdout), &result); err != nil || r.code != exitOK ||
			result.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED || result.GetJobId() != "json-pipeline" {
			t.Errorf("submit -o json: %+v, %v", r, err)
		}
		// $JOBPLANE_SERVER is the default of --server.
		cmd := exec.Command(c.bin, "status", "json-pipeline")
		cmd.Env = append(os.Environ(), serverEnv+"="+c.url)
		out, err := cmd.Output()
		if err != nil || !strings.Contains(string(out), "Status:     FINISHED") {
			t.Errorf("status with $%s: %v\n%s", serverEnv, err, out)
		}
		// "-" reads the job from standard input.
		data, err := os.ReadFile(example("pipeline.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		cmd = c.command("submit", "-d", "--id", "from-stdin", "-")
		cmd.Stdin = bytes.NewReader(data)
		if out, err := cmd.Output(); err != nil || string(out) != "from-stdin\n" {
			t.Errorf("submit -: %q, %v", out, err)
		}
		expect(t, "wait from-stdin", c.run(t, "wait", "from-stdin"), exitOK, nil, nil)
		// Shell completion, of the verbs and of job ids.
		expect(t, "completion", c.run(t, "completion", "bash"), exitOK, []string{"bash completion"}, nil)
		expect(t, "complete a job id", c.run(t, "__complete", "status", "json-"), exitOK, []string{"json-pipeline\tpipeline FINISHED"}, nil)
	})

	t.Run("errors", func(t *testing.T) {
		expect(t, "status of no job", c.run(t, "status", "no-such-job"), exitError, nil, []string{"no-such-job"})
		expect(t, "wait for no job", c.run(t, "wait", "no-such-job"), exitError, nil, []string{"no-such-job"})
		expect(t, "malformed id", c.run(t, "status", "no spaces"), exitUsage, nil, []string{"invalid request: job_id: "})
		r := unreachable(t).run(t, "--retry", "1s", "list")
		expect(t, "unreachable", r, exitError, nil, []string{"jobplane: ", "connection refused"})
		r = unreachable(t).run(t, "--timeout", "1s", "list")
		expect(t, "unreachable", r, exitError, nil, []string{"jobplane: no answer within --timeout"})
		expect(t, "cancel an ended job", c.run(t, "cancel", "attached-pipeline"), exitError, nil, []string{"job attached-pipeline has ended already"})
	})
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader at once,
// with a bounded wait for content.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitFor polls for s in the buffer until within has passed.
func (b *syncBuffer) waitFor(s string, within time.Duration) bool {
	deadline := time.Now().Add(within)
	for !strings.Contains(b.String(), s) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// A job the cluster refuses by a bound it configures: each of the
// server's violations is placed in the file, and nothing is submitted.
func TestClientServerRefusal(t *testing.T) {
	c := startCLICluster(t, "--max-subtasks-per-job", "3")
	r := c.run(t, "submit", example("pipeline.yaml"))
	expect(t, "submit over the limit", r, exitInvalidJob, nil, []string{"the cluster refused the job as invalid; nothing was submitted",
		"pipeline.yaml:8:1: job_graph.vertices: 5 subtasks in all, over the limit of 3", "    8 | vertices:"})
	if jobs := c.listJobs(t); len(jobs) != 0 {
		t.Errorf("jobs after a refused submission: %v", jobs)
	}
}

// A submission that gets no answer names the id it was made under, so
// that the user retries it as the same job.
func TestClientSubmitWithoutAnswerNamesItsID(t *testing.T) {
	r := unreachable(t).run(t, "--retry", "0", "submit", "--detached", example("pipeline.yaml"))
	if r.code != exitError {
		t.Fatalf("exit code %d, want %d\n%s", r.code, exitError, r.stderr)
	}
	m := regexp.MustCompile(`job ([0-9a-f]{32}): the submission may or may not have been persisted; 'jobplane submit --id ([0-9a-f]{32}) `).FindStringSubmatch(r.stderr)
	if m == nil || m[1] != m[2] {
		t.Fatalf("stderr does not name the id to retry with:\n%s", r.stderr)
	}
}

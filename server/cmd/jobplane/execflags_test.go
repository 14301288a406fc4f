package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
)

// Exec settings a TaskExecutor cannot honour stop it at start, with a
// message that says why.
func TestExecFlagsRefused(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"uid without gid", []string{"taskexecutor", "--allow-exec", "--exec-uid", "65534"}, "-exec-uid and -exec-gid go together"},
		{"gid without uid", []string{"standalone", "--exec-gid", "65534"}, "-exec-uid and -exec-gid go together"},
		{"not a variable name", []string{"taskexecutor", "--allow-exec", "--exec-env", "PATH,A=B"}, `"A=B" is not an environment variable's name`},
	}
	if os.Geteuid() != 0 {
		cases = append(cases, struct {
			name string
			args []string
			want string
		}{"not root", []string{"taskexecutor", "--allow-exec", "--exec-uid", "65534", "--exec-gid", "65534"}, "needs a TaskExecutor running as root"})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if got := jobplaneMain(tc.args, &stdout, &stderr); got != exitUsage || !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("exit code %d, stderr %q; want %d and %q", got, stderr.String(), exitUsage, tc.want)
			}
		})
	}
}

// A standalone process's exec task runs in a fresh directory under
// -exec-dir, without the process's own environment but with -exec-env's
// variables and its task's env, and the directory is gone once the job
// finished.
func TestStandaloneExecDirAndEnvironment(t *testing.T) {
	t.Setenv("JOBPLANE_TEST_SECRET", "the server's secret")
	t.Setenv("JOBPLANE_TEST_PASSED", "passed")
	root, out := t.TempDir(), t.TempDir()
	addrFile := filepath.Join(t.TempDir(), "addr")
	p := startJobplane(t, "standalone", "--listen", "127.0.0.1:0", "--listen-addr-file", addrFile, "--data-dir", t.TempDir(),
		"--task-executors", "1", "--allow-exec", "--exec-dir", root, "--exec-env", "JOBPLANE_TEST_PASSED")
	url := "http://" + waitForFile(t, p, addrFile)
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := jobplanev1connect.NewDispatcherServiceClient(&http.Client{Transport: tr}, url)

	script := `{ pwd -P; echo "${JOBPLANE_TEST_SECRET-unset}"; echo "$JOBPLANE_TEST_PASSED"; echo "$MINE"; } > "$OUT/seen"`
	argv, _ := json.Marshal([]string{"sh", "-c", script})
	env, _ := json.Marshal(map[string]string{"OUT": out, "MINE": "mine"})
	graph := &jobplanev1.JobGraph{Name: "where", Vertices: []*jobplanev1.JobVertex{{
		Id: "run", Invokable: "exec", Parallelism: 1, Config: map[string]string{"argv": string(argv), "env": string(env)},
	}}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		resp, err := client.GetClusterOverview(ctx, &jobplanev1.GetClusterOverviewRequest{})
		if err == nil && resp.GetTaskExecutorCount() == 1 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the TaskExecutor never registered: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := client.SubmitJob(ctx, &jobplanev1.SubmitJobRequest{JobId: "where", JobGraph: graph}); err != nil {
		t.Fatalf("submit: %v", err)
	}
	waitJobResult(t, client, "where", jobplanev1.JobStatus_JOB_STATUS_FINISHED)
	b, err := os.ReadFile(filepath.Join(out, "seen"))
	if err != nil {
		t.Fatal(err)
	}
	seen := strings.Split(strings.TrimSpace(string(b)), "\n")
	realRoot, _ := filepath.EvalSymlinks(root)
	if len(seen) != 4 || filepath.Dir(seen[0]) != realRoot || !strings.HasPrefix(filepath.Base(seen[0]), "where-run-0-0-") {
		t.Fatalf("the task saw %q; want its directory under %s, named after its attempt", seen, realRoot)
	}
	if seen[1] != "unset" || seen[2] != "passed" || seen[3] != "mine" {
		t.Errorf("secret %q, passed %q, task env %q; want unset, passed, mine", seen[1], seen[2], seen[3])
	}
	if _, err := os.Stat(seen[0]); !os.IsNotExist(err) {
		t.Errorf("the attempt's directory outlived the job: %v", err)
	}
}

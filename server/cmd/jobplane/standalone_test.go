package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
)

// execJob is a one-task job that appends its id to a file each time it
// runs, so the test can count the runs.
func execJob(id, file string) *jobplanev1.JobGraph {
	argv, _ := json.Marshal([]string{"sh", "-c", `sleep 0.4; echo "$JOB" >> "$OUT"`})
	env, _ := json.Marshal(map[string]string{"JOB": id, "OUT": file})
	return &jobplanev1.JobGraph{Name: id, Vertices: []*jobplanev1.JobVertex{{
		Id: "run", Invokable: "exec", Parallelism: 1, Config: map[string]string{"argv": string(argv), "env": string(env)},
	}}}
}

func runsOf(t *testing.T, file string) map[string]int {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	runs := map[string]int{}
	for _, line := range strings.Fields(string(data)) {
		runs[line]++
	}
	return runs
}

// startStandalone starts `jobplane standalone` on dir and waits until it
// leads with both TaskExecutors registered.
func startStandalone(t *testing.T, dir string) (*process, jobplanev1connect.DispatcherServiceClient, *http.Transport) {
	t.Helper()
	addrFile := filepath.Join(t.TempDir(), "addr")
	p := startJobplane(t, "standalone", "--listen", "127.0.0.1:0", "--listen-addr-file", addrFile,
		"--data-dir", dir, "--allow-exec", "--session-ttl", "3s", "--heartbeat-interval", "200ms", "--heartbeat-timeout", "1900ms", "--cancel-grace", "200ms")
	url := "http://" + waitForFile(t, p, addrFile)
	tr := &http.Transport{}
	client := jobplanev1connect.NewDispatcherServiceClient(&http.Client{Transport: tr}, url)
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := client.GetClusterOverview(ctx, &jobplanev1.GetClusterOverviewRequest{})
		cancel()
		if err == nil && resp.GetTaskExecutorCount() == 2 {
			return p, client, tr
		}
		if time.Now().After(deadline) {
			t.Fatalf("standalone not ready after 30s: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Killed with SIGKILL and restarted on the same data directory, standalone
// recovers every acknowledged job and completes it, and never runs a
// finished job again.
func TestStandaloneSurvivesSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("process kill cycles")
	}
	const cycles = 4
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	dir := t.TempDir()
	out := filepath.Join(t.TempDir(), "runs")
	var acked []string
	finishedRuns := map[string]int{} // runs of jobs seen FINISHED before a kill
	for cycle := range cycles {
		p, client, tr := startStandalone(t, dir)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		for i := range 3 {
			id := fmt.Sprintf("c%dj%d", cycle, i)
			if _, err := client.SubmitJob(ctx, &jobplanev1.SubmitJobRequest{JobId: id, JobGraph: execJob(id, out)}); err != nil {
				t.Fatalf("seed %d: submit %s: %v", seed, id, err)
			}
			acked = append(acked, id)
		}
		time.Sleep(time.Duration(rng.IntN(600)) * time.Millisecond)
		for _, id := range acked {
			resp, err := client.GetJobResult(ctx, &jobplanev1.GetJobResultRequest{JobId: id})
			if err == nil && resp.GetResult().GetStatus() == jobplanev1.JobStatus_JOB_STATUS_FINISHED {
				finishedRuns[id] = runsOf(t, out)[id]
			}
		}
		cancel()
		tr.CloseIdleConnections()
		p.cmd.Process.Signal(syscall.SIGKILL)
		p.wait(t, 20*time.Second)
	}

	p, client, tr := startStandalone(t, dir)
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, id := range acked {
		resp, err := client.GetJobResult(ctx, &jobplanev1.GetJobResultRequest{JobId: id, Wait: true})
		if err != nil || resp.GetResult().GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
			t.Errorf("seed %d: job %s after restarts: %v, %v; want FINISHED", seed, id, resp, err)
		}
	}
	runs := runsOf(t, out)
	for _, id := range acked {
		if runs[id] == 0 {
			t.Errorf("seed %d: acknowledged job %s never ran", seed, id)
		}
	}
	for id, n := range finishedRuns {
		if runs[id] != n {
			t.Errorf("seed %d: job %s ran %d more times after it finished", seed, id, runs[id]-n)
		}
	}
	t.Logf("%d cycles, %d acknowledged jobs, %d seen finished before a kill", cycles, len(acked), len(finishedRuns))
	p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(t, 20*time.Second); code != exitOK {
		t.Errorf("exit code after SIGTERM = %d", code)
	}
}

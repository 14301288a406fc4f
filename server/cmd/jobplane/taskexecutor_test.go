package main

import (
	"context"
	"net/http"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
)

// A TaskExecutor process killed with SIGKILL loses its slots after the
// heartbeat timeout, and the job completes on the TaskExecutor left.
func TestTaskExecutorSIGKILL(t *testing.T) {
	addrFile := filepath.Join(t.TempDir(), "addr")
	jm := startJobplane(t, "standalone", "--listen", "127.0.0.1:0", "--listen-addr-file", addrFile, "--data-dir", t.TempDir(),
		"--task-executors", "1", "--slots", "2", "--session-ttl", "2s", "--heartbeat-interval", "200ms", "--heartbeat-timeout", "1s", "--cancel-grace", "200ms")
	url := "http://" + waitForFile(t, jm, addrFile)
	te := startJobplane(t, "taskexecutor", "--hastore", url, "--slots", "2", "--cancel-grace", "200ms")

	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := jobplanev1connect.NewDispatcherServiceClient(&http.Client{Transport: tr}, url)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		resp, err := client.GetClusterOverview(ctx, &jobplanev1.GetClusterOverviewRequest{})
		if err == nil && resp.GetTaskExecutorCount() == 2 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("two TaskExecutors never registered: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	graph := &jobplanev1.JobGraph{
		Name:     "survivor",
		Vertices: []*jobplanev1.JobVertex{{Id: "work", Invokable: "sleep", Parallelism: 4, Config: map[string]string{"duration": "1s"}}},
		Config: &jobplanev1.JobConfig{RestartStrategy: &jobplanev1.RestartStrategy{Strategy: &jobplanev1.RestartStrategy_FixedDelay_{
			FixedDelay: &jobplanev1.RestartStrategy_FixedDelay{Attempts: 3, Delay: durationpb.New(100 * time.Millisecond)},
		}}},
	}
	if _, err := client.SubmitJob(ctx, &jobplanev1.SubmitJobRequest{JobId: "survivor", JobGraph: graph}); err != nil {
		t.Fatal(err)
	}
	// Wait until tasks run on both TaskExecutors, then kill the separate one.
	for {
		resp, err := client.GetJob(ctx, &jobplanev1.GetJobRequest{JobId: "survivor", View: jobplanev1.JobView_JOB_VIEW_FULL})
		if err != nil {
			t.Fatal(err)
		}
		executors := map[string]bool{}
		for _, v := range resp.GetJob().GetVertices() {
			for _, st := range v.GetSubtasks() {
				if st.GetState() == jobplanev1.ExecutionState_EXECUTION_STATE_RUNNING {
					executors[st.GetTaskExecutorId()] = true
				}
			}
		}
		if len(executors) == 2 {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("tasks never ran on both TaskExecutors")
		}
		time.Sleep(20 * time.Millisecond)
	}
	te.cmd.Process.Signal(syscall.SIGKILL)
	te.wait(t, 20*time.Second)

	resp, err := client.GetJobResult(ctx, &jobplanev1.GetJobResultRequest{JobId: "survivor", Wait: true})
	if err != nil || resp.GetResult().GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("result = %v, %v; want FINISHED", resp, err)
	}
	if resp.GetResult().GetRestartCount() < 1 {
		t.Errorf("restarts = %d, want at least 1 after losing a TaskExecutor", resp.GetResult().GetRestartCount())
	}
	overview, err := client.GetClusterOverview(ctx, &jobplanev1.GetClusterOverviewRequest{})
	if err != nil || overview.GetTaskExecutorCount() != 1 {
		t.Errorf("overview after the kill = %v, %v; want one TaskExecutor", overview, err)
	}
}

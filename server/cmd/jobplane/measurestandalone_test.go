package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
)

var (
	standaloneCycles = flag.Int("standalone.cycles", 0, "TestMeasureStandaloneRestarts: SIGKILL and restart cycles (0 skips it)")
	standaloneJobs   = flag.Int("standalone.jobs", 100, "TestMeasureStandaloneRestarts: one-task jobs running, without a restart strategy")
)

// TestMeasureStandaloneRestarts runs -standalone.jobs one-task jobs
// without a restart strategy on a standalone with its default timings,
// SIGKILLs it and starts it again on its data directory
// -standalone.cycles times, and reports how long after each start every
// job ran again; it fails if any job FAILED (recovery must not be a
// failure). Run it beside CPU hogs to see a loaded machine:
//
//	go test -run TestMeasureStandaloneRestarts -v ./server/cmd/jobplane/ -args -standalone.cycles=20
func TestMeasureStandaloneRestarts(t *testing.T) {
	if *standaloneCycles <= 0 || testing.Short() {
		t.Skip("set -standalone.cycles to measure standalone restarts")
	}
	took := restartStandalone(t, *standaloneJobs, *standaloneCycles)
	t.Logf("%d one-task jobs without restarts, %d SIGKILLs and restarts: 0 FAILED; every job running again %v (median) and %v (max) after the start", *standaloneJobs, len(took), took[len(took)/2], took[len(took)-1])
}

// Under a task lease of an hour, a standalone SIGKILLed and started again
// on its data directory runs its jobs again at once: its in-process
// TaskExecutors come back under the same ids, the members of the
// cluster, and answer that they hold nothing, so the new JobMasters need
// not wait out the lease. With ids that change on a restart, or without
// the membership, the jobs would wait an hour.
func TestStandaloneRestartUnderLeaseRunsAtOnce(t *testing.T) {
	took := restartStandalone(t, 4, 1, "--task-lease", "1h")
	t.Logf("every job running again %v after the restart, under a task lease of 1h", took[0])
}

// restartStandalone runs n one-task jobs without a restart strategy on a
// standalone started with args, SIGKILLs it and starts it again on its
// data directory `cycles` times, and returns how long after each start
// every job ran again, sorted; it fails the test if any job FAILED, or
// did not run again within 2 minutes.
func restartStandalone(t *testing.T, n, cycles int, args ...string) []time.Duration {
	t.Helper()
	dir := t.TempDir()
	start := func() (*process, jobplanev1connect.DispatcherServiceClient) {
		addrFile := filepath.Join(t.TempDir(), "addr")
		p := startJobplane(t, append([]string{"standalone", "--listen", "127.0.0.1:0", "--listen-addr-file", addrFile, "--data-dir", dir,
			"--task-executors", "2", "--slots", fmt.Sprint((n + 1) / 2), "--log-level", "warn"}, args...)...)
		d := jobplanev1connect.NewDispatcherServiceClient(http.DefaultClient, "http://"+waitForFile(t, p, addrFile))
		for deadline := time.Now().Add(time.Minute); ; {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			o, err := d.GetClusterOverview(ctx, &jobplanev1.GetClusterOverviewRequest{})
			cancel()
			if err == nil && o.GetTaskExecutorCount() == 2 {
				return p, d
			}
			if time.Now().After(deadline) {
				t.Fatalf("standalone not ready within a minute: %v", err)
			}
			time.Sleep(20 * time.Millisecond) // a bounded poll
		}
	}
	// everyJobRuns waits until every job's task runs, and fails the test
	// on a FAILED job.
	everyJobRuns := func(d jobplanev1connect.DispatcherServiceClient) {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute)
		for i := 0; i < n; {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			resp, err := d.GetJob(ctx, &jobplanev1.GetJobRequest{JobId: fmt.Sprintf("long-%d", i), View: jobplanev1.JobView_JOB_VIEW_FULL})
			cancel()
			job := resp.GetJob()
			if st := job.GetSummary().GetStatus(); st == jobplanev1.JobStatus_JOB_STATUS_FAILED {
				t.Fatalf("job long-%d FAILED (%s); want none", i, job.GetSummary().GetFailure().GetMessage())
			}
			if err == nil && len(job.GetVertices()) == 1 && len(job.GetVertices()[0].GetSubtasks()) == 1 &&
				job.GetVertices()[0].GetSubtasks()[0].GetState() == jobplanev1.ExecutionState_EXECUTION_STATE_RUNNING {
				i++
				continue
			}
			if time.Now().After(deadline) {
				t.Fatalf("job long-%d not running within 2 minutes: %v, %v", i, job, err)
			}
			time.Sleep(20 * time.Millisecond) // a bounded poll
		}
	}
	p, d := start()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range n {
		id := fmt.Sprintf("long-%d", i)
		g := &jobplanev1.JobGraph{Name: id, Vertices: []*jobplanev1.JobVertex{{Id: "v", Invokable: "sleep", Parallelism: 1,
			Config: map[string]string{"duration": "24h"}}}}
		if _, err := d.SubmitJob(ctx, &jobplanev1.SubmitJobRequest{JobId: id, JobGraph: g}); err != nil {
			t.Fatal(err)
		}
	}
	everyJobRuns(d)
	var took []time.Duration
	for range cycles {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		p.wait(t, 30*time.Second)
		begin := time.Now()
		p, d = start()
		everyJobRuns(d)
		took = append(took, time.Since(begin))
	}
	slices.Sort(took)
	return took
}

package failover

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk"
	"github.com/jobplane/jobplane/server/localcluster"
)

var (
	steadyFor   = flag.Duration("steady.duration", 0, "how long TestSteadyLeadership runs, half idle and half busy, and strictly: no task may be stopped either (0: 20s, and stopped tasks are only logged; `make soak` runs 10m)")
	steadyLease = flag.Duration("steady.task-lease", -1, "TestSteadyLeadership: the jobmanagers' --task-lease (0: none; negative: their default)")
)

// On the default timings, a healthy cluster never changes its leader:
// three etcd members, two jobmanagers and two TaskExecutors, first idle
// with one long job running, then busy with clients running short jobs
// back to back. Any lost lease or leader change fails the test. Run long
// (-steady.duration, as `make soak` does), it is strict: a task stopped
// for a late heartbeat fails it too, and the long job has no restart
// strategy, so such a stop would fail it for good. The short run in
// `make test`, on a machine shared with other tests, logs such stops.
func TestSteadyLeadership(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster for a while")
	}
	d, strict := *steadyFor, *steadyFor > 0
	var edit func(*jobplanev1.JobGraph)
	if !strict {
		d, edit = 20*time.Second, restarting
	}
	cfg := localcluster.ProcessClusterConfig{JobManagers: 2}
	if *steadyLease >= 0 {
		cfg.JobManagerArgs = []string{"--task-lease", steadyLease.String()}
	}
	c, cl, leader, ids := startJobs(t, cfg, 1, edit)
	begin := time.Now()

	// Idle: nothing but the long job and the heartbeats. The wait is the
	// measurement's duration, not a guess at how long something takes.
	time.Sleep(d / 2)

	// Busy: four clients run one-task jobs of 50ms back to back.
	ctx, cancel := context.WithTimeout(context.Background(), d/2)
	defer cancel()
	var (
		wg             sync.WaitGroup
		finished, bad  atomic.Int64
		firstBad       sync.Once
		firstBadReport string
	)
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				id := fmt.Sprintf("busy-%d-%d", w, i)
				jctx, jcancel := context.WithTimeout(context.Background(), time.Minute)
				res, err := cl.Execute(jctx, sleepJob(id, 1, 50*time.Millisecond), sdk.WithJobID(id))
				jcancel()
				if err == nil && res.GetStatus() == jobplanev1.JobStatus_JOB_STATUS_FINISHED {
					finished.Add(1)
					continue
				}
				bad.Add(1)
				firstBad.Do(func() { firstBadReport = fmt.Sprintf("%s: %v, %v", id, res.GetStatus(), err) })
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(begin)

	if n := bad.Load(); n > 0 {
		t.Errorf("%d busy jobs did not finish; the first: %s", n, firstBadReport)
	}
	if finished.Load() == 0 {
		t.Error("no busy job finished")
	}
	sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer scancel()
	if l, err := c.Leader(sctx); err != nil || l != leader {
		t.Errorf("leader after %v: %v (%v); want %s throughout", elapsed, l, err, leader.Name)
	}
	if err := waitRunning(sctx, leader, ids[0]); err != nil {
		t.Errorf("the long job after %v: %v; want RUNNING", elapsed, err)
	}
	var all strings.Builder // every process's whole log (Cluster.Logs keeps tails)
	for _, p := range c.Processes() {
		b, err := os.ReadFile(filepath.Join(p.Dir, "log"))
		if err != nil {
			t.Fatal(err)
		}
		all.Write(b)
	}
	logs := all.String()
	for _, bad := range []string{"session lease not renewed in time", "leadership ended"} {
		if n := strings.Count(logs, bad); n > 0 {
			t.Errorf("%d log lines %q in %v", n, bad, elapsed)
		}
	}
	stops := strings.Count(logs, "silent past its heartbeat timeout")
	if stops > 0 && strict {
		t.Errorf("%d tasks stopped for a JobMaster's silence in %v", stops, elapsed)
	}
	if n := strings.Count(logs, "leadership granted"); n != 1 {
		t.Errorf("%d leadership grants in %v; want 1", n, elapsed)
	}
	ivs := checkAttempts(t, c)
	starts := 0
	for _, iv := range ivs {
		if iv.JobID == ids[0] {
			starts++
		}
	}
	if starts != 2 && strict { // its two subtasks, once each
		t.Errorf("the long job's subtasks started %d times; want 2", starts)
	}
	t.Logf("steady for %v (half idle, half busy): %d busy jobs finished, one leader; %d tasks stopped for a JobMaster's silence, the long job's subtasks started %d times",
		elapsed, finished.Load(), stops, starts)
	if t.Failed() {
		t.Log(c.Logs())
	}
}

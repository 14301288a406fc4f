package failover

import (
	"context"
	"flag"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/jobplane/jobplane/sdk"
	"github.com/jobplane/jobplane/server/localcluster"
)

var (
	adoptCycles = flag.Int("adopt.cycles", 0, "TestMeasureAdoption: SIGKILL and SIGTERM cycles of the leader (0 skips it)")
	adoptJobs   = flag.Int("adopt.jobs", 100, "TestMeasureAdoption: one-task jobs running")
	adoptTEs    = flag.Int("adopt.taskexecutors", 4, "TestMeasureAdoption: TaskExecutors")
)

// TestMeasureAdoption measures, with a task lease, what a change of
// leader costs the running work: -adopt.jobs one-task jobs on
// -adopt.taskexecutors TaskExecutors, the leader SIGKILLed and then
// SIGTERMed -adopt.cycles times each (restarted as a standby each time);
// it reports the time from the signal until every job runs again under
// the new leader, and fails if any task started again:
//
//	go test -run TestMeasureAdoption -v ./internal/failover/ -args -adopt.cycles=10 -adopt.jobs=1000 -adopt.taskexecutors=10
func TestMeasureAdoption(t *testing.T) {
	if *adoptCycles <= 0 || testing.Short() {
		t.Skip("set -adopt.cycles to measure adoption")
	}
	const lease = time.Minute // longer than any cycle waits: a job running again was adopted
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(*adoptCycles)*(10*ttl(t)+2*time.Minute)+5*time.Minute)
	defer cancel()
	c, err := localcluster.StartProcessCluster(ctx, localcluster.ProcessClusterConfig{
		JobManagers: 2, TaskExecutors: *adoptTEs, Slots: (*adoptJobs + *adoptTEs - 1) / *adoptTEs,
		JobManagerArgs: []string{"--task-lease", lease.String()},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var ids []string
	for i := range *adoptJobs {
		id := fmt.Sprintf("adopt-%d", i)
		if _, err := cl.Submit(ctx, sleepJob(id, 1, 24*time.Hour), sdk.WithJobID(id)); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	l, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := waitRunning(ctx, l, ids...); err != nil {
		t.Fatal(err)
	}
	first := time.Now() // every job's task has started
	took := map[syscall.Signal][]time.Duration{}
	for cycle := range *adoptCycles {
		for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
			start := time.Now()
			if err := l.Signal(sig); err != nil {
				t.Fatal(err)
			}
			next, err := c.WaitLeader(ctx, l)
			if err != nil {
				t.Fatalf("cycle %d, %v: %v", cycle, sig, err)
			}
			if err := waitRunning(ctx, next, ids...); err != nil {
				t.Fatalf("cycle %d, %v: %v", cycle, sig, err)
			}
			took[sig] = append(took[sig], time.Since(start))
			if err := l.Wait(ctx); err != nil {
				t.Fatal(err)
			}
			if err := l.Restart(ctx); err != nil {
				t.Fatal(err)
			}
			l = next
		}
	}
	km, kx := summary(took[syscall.SIGKILL])
	tm, tx := summary(took[syscall.SIGTERM])
	t.Logf("%d one-task jobs on %d TaskExecutors, task lease %v, session TTL %v", *adoptJobs, *adoptTEs, lease, ttl(t))
	t.Logf("SIGKILL → every job running under the new leader: median %v, max %v over %d cycles", km, kx, len(took[syscall.SIGKILL]))
	t.Logf("SIGTERM → every job running under the new leader: median %v, max %v over %d cycles", tm, tx, len(took[syscall.SIGTERM]))
	if kx >= lease || tx >= lease {
		t.Errorf("a cycle outlasted the task lease: jobs may have been deployed anew")
	}
	ivs := checkAttempts(t, c)
	restarted := 0
	for _, iv := range ivs {
		if iv.Start.After(first) {
			restarted++
		}
	}
	t.Logf("task restarts: %d (attempts started after the jobs first ran, of %d)", restarted, len(ivs))
	if restarted > 0 {
		t.Errorf("%d tasks started again across the changes of leader; want 0", restarted)
	}
}

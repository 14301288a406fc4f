package failover

import (
	"context"
	"flag"
	"fmt"
	"syscall"
	"testing"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
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
	var ids []string
	for i := range *adoptJobs {
		id := fmt.Sprintf("adopt-%d", i)
		if _, err := cl.Submit(ctx, sleepJob(id, 1, 24*time.Hour), sdk.WithJobID(id)); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	l, err := leadsRunning(ctx, c, ids)
	if err != nil {
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
			next, err := leadsRunning(ctx, c, ids, l)
			if err != nil {
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

var pauseRounds = flag.Int("pause.rounds", 0, "TestMeasurePause: SIGSTOP rounds of each length (0 skips it)")

// TestMeasurePause pauses the leader (SIGSTOP) for half, twice and ten
// times the session TTL, -pause.rounds times each, with jobs running
// under a task lease, then resumes it (SIGCONT); it fails on any task
// that started again, any two attempts of a subtask that overlapped, and
// any answer as leader from a process paused past its TTL once another
// leads:
//
//	go test -run TestMeasurePause -v -timeout 2h ./internal/failover/ -args -pause.rounds=20
func TestMeasurePause(t *testing.T) {
	if *pauseRounds <= 0 || testing.Short() {
		t.Skip("set -pause.rounds to measure pauses")
	}
	const lease = time.Minute // longer than the longest pause and its takeover
	c, cl, l, ids := start(t, localcluster.ProcessClusterConfig{JobManagers: 2, JobManagerArgs: []string{"--task-lease", lease.String()}}, 4)
	first := time.Now()
	answered, changes := 0, 0
	for _, factor := range []float64{0.5, 2, 10} {
		pause := time.Duration(factor * float64(ttl(t)))
		var back []time.Duration
		for round := range *pauseRounds {
			ctx := within(t, pause+phase(t))
			if err := l.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			time.Sleep(pause) // the pause is the scenario's input
			if err := l.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			resumed := time.Now()
			next, err := c.WaitLeader(ctx)
			if err != nil {
				t.Fatalf("%v pause, round %d: %v", pause, round, err)
			}
			if next != l {
				changes++
				// The paused process lost its lease: never an answer as leader.
				if leads, _, _ := l.Probe(ctx); leads {
					answered++
					t.Errorf("%v pause, round %d: %s answered as the leader after SIGCONT while %s leads", pause, round, l.Name, next.Name)
				}
			}
			if err := waitRunning(ctx, next, ids...); err != nil {
				t.Fatalf("%v pause, round %d: %v", pause, round, err)
			}
			back = append(back, time.Since(resumed))
			l = next
		}
		m, x := summary(back)
		t.Logf("SIGSTOP for %v (%.1f× the TTL), %d rounds: every job running under the leader %v (median) and %v (max) after SIGCONT", pause, factor, len(back), m, x)
	}
	finish(t, cl, ids, jobplanev1.JobStatus_JOB_STATUS_CANCELED)
	ivs := checkAttempts(t, c) // fails on overlapping attempts
	restarted := 0
	for _, iv := range ivs {
		if iv.Start.After(first) {
			restarted++
		}
	}
	t.Logf("leader changes %d, answers as leader from a deposed paused process %d, task restarts %d (of %d attempts)", changes, answered, restarted, len(ivs))
	if restarted > 0 {
		t.Errorf("%d tasks started again across the pauses; want 0", restarted)
	}
}

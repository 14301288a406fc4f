package failover

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/internal/chaos"
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
	m, err := measureAdoption(ctx, *adoptJobs, *adoptTEs, *adoptCycles, lease)
	if err != nil {
		t.Fatal(err)
	}
	km, kx := summary(m.kill)
	tm, tx := summary(m.term)
	t.Logf("%d one-task jobs on %d TaskExecutors, task lease %v, session TTL %v", *adoptJobs, *adoptTEs, lease, ttl(t))
	t.Logf("SIGKILL → every job running under the new leader: median %v, max %v over %d cycles", km, kx, len(m.kill))
	t.Logf("SIGTERM → every job running under the new leader: median %v, max %v over %d cycles", tm, tx, len(m.term))
	if kx >= lease || tx >= lease {
		t.Errorf("a cycle outlasted the task lease: jobs may have been deployed anew")
	}
	if m.overlap != nil {
		t.Error(m.overlap)
	}
	t.Logf("task restarts: %d (attempts started after the jobs first ran, of %d)", m.restarted, m.attempts)
	if m.restarted > 0 {
		t.Errorf("%d tasks started again across the changes of leader; want 0", m.restarted)
	}
}

// BenchmarkAdoption times changes of leader with running work, on the
// default timings (and the default task lease), for `make bench`: with
// $ADOPT_JOBS one-task jobs (default 1000) on 10 TaskExecutors, and, as
// its floor side by side, with one job; the leader SIGKILLed and then
// SIGTERMed $ADOPT_CYCLES times each (default 5). It reports the median
// and maximum time from the signal until the next leader reports every
// job running, and the tasks that started again (adoption wants none).
// Each benchmark iteration runs every cycle; run it with -benchtime=1x.
func BenchmarkAdoption(b *testing.B) {
	jobs, cycles := 1000, 5
	if v, err := strconv.Atoi(os.Getenv("ADOPT_JOBS")); err == nil && v > 0 {
		jobs = v
	}
	if v, err := strconv.Atoi(os.Getenv("ADOPT_CYCLES")); err == nil && v > 0 {
		cycles = v
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	var all, one adoption
	for range b.N {
		for _, run := range []struct {
			jobs int
			into *adoption
		}{{1, &one}, {jobs, &all}} {
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(cycles)*(10*ttl(b)+2*time.Minute)+5*time.Minute)
			m, err := measureAdoption(ctx, run.jobs, 10, cycles, 0)
			cancel()
			if err != nil {
				b.Fatal(err)
			}
			if m.overlap != nil {
				b.Error(m.overlap)
			}
			run.into.kill, run.into.term = append(run.into.kill, m.kill...), append(run.into.term, m.term...)
			run.into.restarted += m.restarted
		}
	}
	for _, r := range []struct {
		prefix string
		m      adoption
	}{{"adopt-", all}, {"adopt-floor-", one}} {
		km, kx := summary(r.m.kill)
		tm, tx := summary(r.m.term)
		b.ReportMetric(ms(km), r.prefix+"kill-p50-ms")
		b.ReportMetric(ms(kx), r.prefix+"kill-max-ms")
		b.ReportMetric(ms(tm), r.prefix+"term-p50-ms")
		b.ReportMetric(ms(tx), r.prefix+"term-max-ms")
		b.ReportMetric(float64(r.m.restarted), r.prefix+"restarts")
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(jobs), "adopt-jobs")
	b.ReportMetric(float64(len(all.kill)), "adopt-cycles")
}

// adoption is what measureAdoption measured.
type adoption struct {
	kill, term []time.Duration // signal → every job running under the new leader
	restarted  int             // attempts started after every job first ran
	attempts   int             // attempts logged in all
	overlap    error           // two attempts of a subtask at once, if any
}

// measureAdoption runs jobs one-task jobs on tes TaskExecutors under two
// jobmanagers with the task lease given (0: the default), SIGKILLs and
// then SIGTERMs the leader cycles times each (restarting it as a standby
// each time), and times each signal until the next leader reports every
// job running.
func measureAdoption(ctx context.Context, jobs, tes, cycles int, lease time.Duration) (adoption, error) {
	var m adoption
	cfg := localcluster.ProcessClusterConfig{JobManagers: 2, TaskExecutors: tes, Slots: (jobs + tes - 1) / tes}
	if lease > 0 {
		cfg.JobManagerArgs = []string{"--task-lease", lease.String()}
	}
	c, err := localcluster.StartProcessCluster(ctx, cfg)
	if err != nil {
		return m, err
	}
	defer c.Close()
	cl, err := c.Client()
	if err != nil {
		return m, err
	}
	var ids []string
	for i := range jobs {
		id := fmt.Sprintf("adopt-%d", i)
		if _, err := cl.Submit(ctx, sleepJob(id, 1, 24*time.Hour), sdk.WithJobID(id)); err != nil {
			return m, err
		}
		ids = append(ids, id)
	}
	l, err := leadsRunning(ctx, c, ids)
	if err != nil {
		return m, err
	}
	first := time.Now() // every job's task has started
	for cycle := range cycles {
		for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
			start := time.Now()
			if err := l.Signal(sig); err != nil {
				return m, err
			}
			next, err := leadsRunning(ctx, c, ids, l)
			if err != nil {
				return m, fmt.Errorf("cycle %d, %v: %w", cycle, sig, err)
			}
			if sig == syscall.SIGKILL {
				m.kill = append(m.kill, time.Since(start))
			} else {
				m.term = append(m.term, time.Since(start))
			}
			if err := l.Wait(ctx); err != nil {
				return m, err
			}
			if err := l.Restart(ctx); err != nil {
				return m, err
			}
			l = next
		}
	}
	ivs, err := chaos.Attempts(c.TaskExecutors())
	if err != nil {
		return m, err
	}
	m.overlap = chaos.CheckAttempts(ivs)
	m.attempts = len(ivs)
	for _, iv := range ivs {
		if iv.Start.After(first) {
			m.restarted++
		}
	}
	return m, nil
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

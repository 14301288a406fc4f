package failover

import (
	"context"
	"syscall"
	"testing"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/server/localcluster"
)

// With a task lease, a change of leader costs the running work nothing:
// after a SIGKILL or a SIGTERM of the leader, the new leader adopts the
// running attempts from the TaskExecutors instead of deploying them again.
// No attempt starts after the change; every job is RUNNING again under
// the new leader, on the attempts that ran before, and its cancel (under
// the new token) stops them.
func TestAdoptAcrossFailover(t *testing.T) {
	for _, tc := range []struct {
		name string
		sig  syscall.Signal
	}{{"SIGKILL", syscall.SIGKILL}, {"SIGTERM", syscall.SIGTERM}} {
		t.Run(tc.name, func(t *testing.T) {
			const lease = time.Minute // longer than the test waits: a job RUNNING again was adopted
			c, cl, l, ids := start(t, localcluster.ProcessClusterConfig{JobManagers: 2, JobManagerArgs: []string{"--task-lease", lease.String()}}, 2)
			changed := time.Now()
			if err := l.Signal(tc.sig); err != nil {
				t.Fatal(err)
			}
			ctx := within(t, phase(t))
			next, err := leadsRunning(ctx, c, ids, l)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s of %s: every job RUNNING again under %s after %v (task lease %v)", tc.name, l.Name, next.Name, time.Since(changed), lease)
			if time.Since(changed) >= lease {
				t.Fatalf("the jobs ran again only after the task lease: deployed anew, not adopted")
			}
			finish(t, cl, ids, jobplanev1.JobStatus_JOB_STATUS_CANCELED)
			ivs := checkAttempts(t, c)
			started := map[string]int{}
			for _, iv := range ivs {
				started[iv.JobID]++
				if iv.Start.After(changed) {
					t.Errorf("an attempt started after the change of leader: %v", iv)
				}
			}
			for _, id := range ids {
				if started[id] != 2 {
					t.Errorf("job %s ran %d attempts; want its 2 subtasks' first, adopted", id, started[id])
				}
			}
		})
	}
}

// With a task lease, a leader paused past its session TTL (SIGSTOP) loses
// the leadership, and the new leader adopts the running attempts; resumed
// (SIGCONT), the old leader answers nothing as the leader and stops
// nothing; when the new leader dies in turn, the old one, now a standby,
// takes the jobs back and adopts them again. No attempt ever starts
// again.
func TestAdoptAcrossPause(t *testing.T) {
	const lease = time.Minute
	c, cl, l, ids := start(t, localcluster.ProcessClusterConfig{JobManagers: 2, JobManagerArgs: []string{"--task-lease", lease.String()}}, 2)
	ctx := within(t, 3*phase(t))
	stopped := time.Now()
	if err := l.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	next, err := leadsRunning(ctx, c, ids, l)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("SIGSTOP of %s: every job RUNNING under %s after %v", l.Name, next.Name, time.Since(stopped))
	resumed := time.Now()
	if err := l.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if err := waitFor(ctx, func(ctx context.Context) error {
		leads, _, err := l.Probe(ctx)
		if leads {
			t.Errorf("%s answered as the leader %v after SIGCONT", l.Name, time.Since(resumed))
			return nil
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := waitRunning(ctx, next, ids...); err != nil {
		t.Fatalf("after the old leader resumed: %v", err)
	}
	back := time.Now()
	next.Kill()
	again, err := leadsRunning(ctx, c, ids, next)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("SIGKILL of %s: every job RUNNING under %s after %v", next.Name, again.Name, time.Since(back))
	if time.Since(stopped) >= lease {
		t.Fatalf("the test outlasted the task lease (%v): a job RUNNING again may have been deployed anew", lease)
	}
	finish(t, cl, ids, jobplanev1.JobStatus_JOB_STATUS_CANCELED)
	for _, iv := range checkAttempts(t, c) {
		if iv.Start.After(stopped) {
			t.Errorf("an attempt started after the pause: %v", iv)
		}
	}
}

// A job's first JobMaster, in the term of the jobmanager leadership that
// took the job's submission, has no predecessor to adopt from and
// deploys at once, even where the plan's write and the job's leadership
// are two calls (jobmanagers on a `jobplane hastore`, over
// HAStoreService). Under an hour's task lease, a JobMaster that looked
// for attempts to adopt would leave the job waiting for the hour.
func TestFirstJobMasterDeploysAtOnce(t *testing.T) {
	const lease = time.Hour
	begin := time.Now()
	start(t, localcluster.ProcessClusterConfig{JobManagers: 1, EmbeddedStore: true, JobManagerArgs: []string{"--task-lease", lease.String()}}, 2)
	t.Logf("2 jobs submitted and running under a task lease of %v after %v", lease, time.Since(begin))
}

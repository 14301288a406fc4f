package hacluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"syscall"
	"time"

	"github.com/jobplane/jobplane/sdk"
)

// measureJobs is how many long-running jobs MeasureFailover keeps running,
// each with two subtasks.
const measureJobs = 2

// MeasureFailover starts a cluster of cfg (it needs at least two
// jobmanagers) with a few long-running jobs and runs cycles cycles, each a
// SIGKILL of the leader and then a SIGTERM of the next one:
//   - killToRunning: from the SIGKILL to the first job seen RUNNING, with
//     a RUNNING subtask, at the jobmanager that leads next (which
//     recovered it);
//   - termHandoff: from the SIGTERM to another jobmanager answering as the
//     leader.
//
// After each signal the old leader is restarted as a standby, and the next
// signal waits until every job runs again. It returns the durations
// measured so far with the first failure, and closes the cluster.
func MeasureFailover(ctx context.Context, cfg Config, cycles int) (killToRunning, termHandoff []time.Duration, err error) {
	if cfg.withDefaults().JobManagers < 2 {
		return nil, nil, errors.New("hacluster: MeasureFailover needs two jobmanagers or more")
	}
	c, err := Start(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	defer c.Close()
	cl, err := c.Client()
	if err != nil {
		return nil, nil, err
	}
	defer cl.Close()
	var ids []string
	for i := range measureJobs {
		id := fmt.Sprintf("measure-%d", i)
		if _, err := cl.Submit(ctx, SleepJob(id, 2, 24*time.Hour), sdk.WithJobID(id)); err != nil {
			return nil, nil, err
		}
		ids = append(ids, id)
	}
	bound := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(ctx, 4*SessionTTL()+30*time.Second)
	}
	steady := func() (*JobManager, error) {
		ctx, cancel := bound()
		defer cancel()
		l, err := c.WaitLeader(ctx)
		if err != nil {
			return nil, err
		}
		return l, l.WaitRunning(ctx, ids...)
	}
	for cycle := range cycles {
		for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
			l, err := steady()
			if err != nil {
				return killToRunning, termHandoff, fmt.Errorf("cycle %d, before %v: %w\n%s", cycle, sig, err, c.Logs())
			}
			d, err := c.failover(ctx, l, sig, ids, bound)
			if err != nil {
				return killToRunning, termHandoff, fmt.Errorf("cycle %d, %v: %w\n%s", cycle, sig, err, c.Logs())
			}
			if sig == syscall.SIGKILL {
				killToRunning = append(killToRunning, d)
			} else {
				termHandoff = append(termHandoff, d)
			}
		}
	}
	return killToRunning, termHandoff, nil
}

// failover signals the leader l and measures: for SIGKILL until a job runs
// at the next leader, for SIGTERM until the next leader answers. Then it
// restarts l.
func (c *Cluster) failover(ctx context.Context, l *JobManager, sig syscall.Signal, ids []string, bound func() (context.Context, context.CancelFunc)) (time.Duration, error) {
	ctx, cancel := bound()
	defer cancel()
	start := time.Now()
	if err := l.Signal(sig); err != nil {
		return 0, err
	}
	next, err := c.WaitLeader(ctx, l)
	if err != nil {
		return 0, err
	}
	d := time.Since(start)
	if sig == syscall.SIGKILL {
		at, err := next.WaitAnyRunning(ctx, ids...)
		if err != nil {
			return 0, err
		}
		d = at.Sub(start)
	}
	if err := l.Wait(ctx); err != nil {
		return 0, err
	}
	return d, l.Restart(ctx)
}

// Summary returns the median and the maximum of ds (zeros for none).
func Summary(ds []time.Duration) (median, maximum time.Duration) {
	if len(ds) == 0 {
		return 0, 0
	}
	s := slices.Sorted(slices.Values(ds))
	median = s[len(s)/2]
	if len(s)%2 == 0 {
		median = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return median, s[len(s)-1]
}

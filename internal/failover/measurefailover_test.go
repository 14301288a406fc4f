package failover

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"syscall"
	"time"

	"github.com/jobplane/jobplane/sdk"
	"github.com/jobplane/jobplane/server/localcluster"
)

// measureJobs is how many long-running jobs MeasureFailover keeps running,
// each with two subtasks.
const measureJobs = 2

// measureFailover starts a cluster of cfg (it needs at least two
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
func measureFailover(ctx context.Context, cfg localcluster.ProcessClusterConfig, cycles int) (killToRunning, termHandoff []time.Duration, err error) {
	if cfg.JobManagers != 0 && cfg.JobManagers < 2 {
		return nil, nil, errors.New("measureFailover needs two jobmanagers or more")
	}
	c, err := localcluster.StartProcessCluster(ctx, cfg)
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
		if _, err := cl.Submit(ctx, sleepJob(id, 2, 24*time.Hour), sdk.WithJobID(id)); err != nil {
			return nil, nil, err
		}
		ids = append(ids, id)
	}
	bound := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(ctx, 4*c.SessionTTL()+30*time.Second)
	}
	steady := func() (*localcluster.JobManagerProcess, error) {
		ctx, cancel := bound()
		defer cancel()
		l, err := c.WaitLeader(ctx)
		if err != nil {
			return nil, err
		}
		return l, waitRunning(ctx, l, ids...)
	}
	for cycle := range cycles {
		for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
			l, err := steady()
			if err != nil {
				return killToRunning, termHandoff, fmt.Errorf("cycle %d, before %v: %w\n%s", cycle, sig, err, c.Logs())
			}
			d, err := failover(c, l, sig, ids, bound)
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
func failover(c *localcluster.ProcessCluster, l *localcluster.JobManagerProcess, sig syscall.Signal, ids []string, bound func() (context.Context, context.CancelFunc)) (time.Duration, error) {
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
		at, err := waitAnyRunning(ctx, next, ids...)
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

// summary returns the median and the maximum of ds (zeros for none).
func summary(ds []time.Duration) (median, maximum time.Duration) {
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

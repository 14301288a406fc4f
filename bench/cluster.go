package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
)

// cluster is what most scenarios measure: a JobManager process, bench
// TaskExecutors against it, and optionally the floor beside it.
type cluster struct {
	jm    *JobManager
	tes   *TaskExecutors
	rec   *Recorder
	floor *Floor
	slots int // in all
	// epoch is the JobManager's leadership epoch once the cluster was
	// ready: a later one means it lost its leadership and won it anew.
	epoch uint64
}

// clusterReadyTimeout bounds the wait for a cluster's TaskExecutors to
// register.
const clusterReadyTimeout = 60 * time.Second

// startCluster starts the floor (if withFloor), a JobManager and n
// TaskExecutors of slots slots each, and waits until all have registered.
// On failure, everything started is stopped.
func startCluster(ctx context.Context, e *env, n, slots int, withFloor bool) (_ *cluster, err error) {
	// c, not the named result, is what the deferred stop sees: a failed
	// start returns nil.
	c := &cluster{rec: NewRecorder(), slots: n * slots}
	defer func() {
		if err != nil {
			c.stop()
		}
	}()
	if withFloor {
		if c.floor, err = StartFloor(ctx, e.Self); err != nil {
			return nil, err
		}
	}
	if c.jm, err = StartJobManager(ctx, e.JobPlane, e.LogLevel, e.JobManagerArgs...); err != nil {
		return nil, err
	}
	if c.tes, err = StartTaskExecutors(c.jm.URL, n, slots, c.rec, e.log); err != nil {
		return nil, err
	}
	if err = c.jm.WaitReady(ctx, n, n*slots, clusterReadyTimeout); err != nil {
		return nil, err
	}
	if ov, err := c.overview(ctx); err == nil {
		c.epoch = ov.GetLeader().GetToken().GetEpoch()
	}
	return c, nil
}

// stop stops whatever of the cluster runs: TaskExecutors first, so that
// they do not chase a JobManager that is going away.
func (c *cluster) stop() {
	if c.tes != nil {
		if err := c.tes.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "bench: stopping TaskExecutors: %v\n", err)
		}
		c.tes = nil
	}
	if c.jm != nil {
		c.jm.Stop()
		c.jm = nil
	}
	if c.floor != nil {
		c.floor.Stop()
		c.floor = nil
	}
}

// overview returns the JobManager's cluster overview.
func (c *cluster) overview(ctx context.Context) (*jobplanev1.GetClusterOverviewResponse, error) {
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	return c.jm.Dispatcher.GetClusterOverview(cctx, &jobplanev1.GetClusterOverviewRequest{})
}

// waitSlotsFree polls the overview until every slot is available, every
// pause apart, and returns when it saw that; it fails after timeout.
func (c *cluster) waitSlotsFree(ctx context.Context, pause, timeout time.Duration) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	for {
		ov, err := c.overview(ctx)
		if err == nil && int(ov.GetFreeSlotCount()) >= c.slots {
			return time.Now(), nil
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("slots not all free within %v: overview %v, err %v", timeout, ov, err)
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-time.After(pause):
		}
	}
}

// waitFor receives from ch, failing after timeout.
func waitFor[T any](ctx context.Context, ch <-chan T, timeout time.Duration, what string) (T, error) {
	var zero T
	select {
	case v := <-ch:
		return v, nil
	case <-ctx.Done():
		return zero, fmt.Errorf("%s: %w", what, ctx.Err())
	case <-time.After(timeout):
		return zero, fmt.Errorf("%s: not within %v", what, timeout)
	}
}

// result waits for the result of job id (GetJobResult with wait), at
// most timeout, and fails unless the job FINISHED.
func (c *cluster) result(ctx context.Context, id string, timeout time.Duration) error {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := c.jm.Dispatcher.GetJobResult(cctx, &jobplanev1.GetJobResultRequest{JobId: id, Wait: true})
	if err != nil {
		return fmt.Errorf("result of %s: %w", id, err)
	}
	if st := resp.GetResult().GetStatus(); st != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		return errors.New("job " + id + " ended " + st.String())
	}
	return nil
}

// settle waits until the JobManager is quiet (under a tenth of a core
// over 250ms), at most bound, so that work left from the last run does
// not weigh on the next measurement, the floor's least of all. It
// returns the cores used in the last interval, for a note when the
// JobManager never quieted.
func (c *cluster) settle(ctx context.Context, bound time.Duration) float64 {
	return settleProcess(ctx, c.jm.PID(), bound)
}

// settleProcess waits until process pid is quiet (under a tenth of a
// core over 250ms), at most bound, and returns the cores it used in the
// last interval.
func settleProcess(ctx context.Context, pid int, bound time.Duration) float64 {
	m, err := NewCPUMeter(pid)
	if err != nil {
		return 0
	}
	deadline := time.Now().Add(bound)
	for {
		if sleep(ctx, 250*time.Millisecond) != nil {
			return 0
		}
		cores, err := m.Cores()
		if err != nil || cores < 0.1 || time.Now().After(deadline) {
			return cores
		}
	}
}

// leadershipNote says whether the JobManager lost its leadership since
// the cluster was ready (a loaded machine can starve its session's
// renewals); empty if it kept it.
func (c *cluster) leadershipNote(ctx context.Context) string {
	ov, err := c.overview(ctx)
	switch {
	case err != nil:
		return fmt.Sprintf("the JobManager did not answer GetClusterOverview at the end (%v)", err)
	case ov.GetLeader().GetToken().GetEpoch() != c.epoch:
		return fmt.Sprintf("the JobManager lost its leadership and won it anew (epoch %d → %d)", c.epoch, ov.GetLeader().GetToken().GetEpoch())
	}
	return ""
}

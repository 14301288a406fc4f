package dispatcher

import (
	"context"
	"errors"
	"fmt"

	"github.com/jobplane/jobplane/server/hastore"
)

// CleanupPendingError says a job ended but its cleanup is not done yet, so
// its kept result may not be removed (Purge, and a submission that reuses
// the id). Nothing was done; the client retries.
type CleanupPendingError struct {
	JobID string
}

func (e *CleanupPendingError) Error() string {
	return fmt.Sprintf("dispatcher: job %s ended but its cleanup is not done yet; retry", e.JobID)
}

// Purge removes a globally terminal job's kept result from the store now,
// instead of when the result retention would, after which the job id is
// unknown and free. With a run id, only that run's result. Errors:
// ErrJobNotFound (a *RunNotFoundError for another run) for a job that is
// not known, a *NotTerminalError for a live job, a *CleanupPendingError
// while its cleanup is not done, ErrNotLeading, and the store's errors
// (the result may or may not be removed then).
func (d *Dispatcher) Purge(ctx context.Context, jobID, runID string) error {
	for {
		ld, j, err := d.findRun(ctx, jobID, runID)
		if err != nil {
			return err
		}
		d.mu.Lock()
		if wait := j.purging; wait != nil {
			d.mu.Unlock()
			select {
			case <-wait:
			case <-ctx.Done():
				return ctx.Err()
			}
			continue
		}
		if j.result == nil {
			st := j.status()
			d.mu.Unlock()
			return &NotTerminalError{JobID: jobID, Status: st}
		}
		j.purging = make(chan struct{})
		d.mu.Unlock()
		if err := d.removeResult(ld, j); err != nil {
			return err
		}
		return d.stillLeading(ld)
	}
}

// removeResult deletes the kept result of j, whose purging the caller set
// under d.mu, and forgets j once it is gone. The store refuses it while
// the job's cleanup is not done (a dirty result, or a plan not deleted
// yet): a *CleanupPendingError.
func (d *Dispatcher) removeResult(ld *leadership, j *job) error {
	ctx, cancel := context.WithTimeout(ld.ctx, d.cfg.PersistTimeout)
	err := d.cfg.Store.DeleteJobResultEntry(ctx, ld.l.Fence(), j.id)
	cancel()
	d.mu.Lock()
	if err == nil {
		ld.forgetLocked(j)
	}
	close(j.purging)
	j.purging = nil
	d.mu.Unlock()
	switch {
	case err == nil:
		d.log.Info("removed a job's result", "job", j.id, "run", j.runID)
		return nil
	case errors.Is(err, hastore.ErrResultDirty), errors.Is(err, hastore.ErrPlanNotDeleted):
		return &CleanupPendingError{JobID: j.id}
	case errors.Is(err, hastore.ErrStaleToken):
		d.log.Warn("the HA store refused a result's removal as stale; stepping down", "job", j.id)
		go d.stepDown(ld)
		return ErrNotLeading
	case d.stillLeading(ld) != nil:
		return ErrNotLeading
	}
	return err
}

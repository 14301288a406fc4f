package dispatcher

import (
	"context"
	"errors"
	"fmt"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/internal/jobmaster"
)

// ErrNoCheckpoints: the server's HA store keeps no checkpoints, so there
// are no savepoints either.
var ErrNoCheckpoints = errors.New("dispatcher: the server's HA store keeps no checkpoints or savepoints")

// checkpoints returns the store's checkpoints, or ErrNoCheckpoints.
func (d *Dispatcher) checkpoints() (hastore.Checkpoints, error) {
	c, ok := d.cfg.Store.(hastore.Checkpoints)
	if !ok {
		return nil, ErrNoCheckpoints
	}
	return c, nil
}

// checkRestore checks, for a job to be submitted, that the savepoint it
// restores from exists. A resubmission of a known job is not checked: it
// is answered as always, whether or not the savepoint still exists.
func (d *Dispatcher) checkRestore(ctx context.Context, jobID, savepoint string) error {
	if savepoint == "" {
		return nil
	}
	if _, err := d.Owner(ctx, jobID); err == nil {
		return nil
	}
	c, err := d.checkpoints()
	if err != nil {
		return err
	}
	if _, err = c.GetSavepoint(ctx, savepoint); errors.Is(err, hastore.ErrSavepointNotFound) {
		return &SavepointNotFoundError{ID: savepoint}
	}
	return err
}

// SavepointNotFoundError says a job restores from a savepoint that does
// not exist.
type SavepointNotFoundError struct{ ID string }

func (e *SavepointNotFoundError) Error() string {
	return fmt.Sprintf("no savepoint %q: job_graph.config.restore_from_savepoint names none (list them with ListSavepoints)", e.ID)
}

// Checkpoints returns a job's checkpoints as the store keeps them, and
// its checkpoint statistics while a JobMaster runs it.
func (d *Dispatcher) Checkpoints(ctx context.Context, jobID string) ([]*hastorev1.CompletedCheckpoint, *jobplanev1.CheckpointStats, error) {
	if _, _, err := d.find(ctx, jobID); err != nil {
		return nil, nil, err
	}
	c, err := d.checkpoints()
	if err != nil {
		return nil, nil, err
	}
	cps, err := c.ListCheckpoints(ctx, jobID, 0, 0)
	if err != nil {
		return nil, nil, err
	}
	// The statistics of a running job, or of an ended one whose final
	// details are still kept.
	var stats *jobplanev1.CheckpointStats
	if det, _, err := d.Details(ctx, jobID, "", false, jobmaster.Page{}); err == nil {
		stats = det.GetCheckpoints()
	}
	return cps, stats, nil
}

// Savepoint takes a savepoint of a running job and, with stop, cancels the
// job once it is durable; if that cancel fails, it returns the savepoint
// with the cancel's error.
func (d *Dispatcher) Savepoint(ctx context.Context, jobID string, stop bool) (*hastorev1.Savepoint, error) {
	_, j, err := d.find(ctx, jobID)
	if err != nil {
		return nil, err
	}
	if _, err := d.checkpoints(); err != nil {
		return nil, err
	}
	d.mu.Lock()
	result, r := j.result, j.runner
	d.mu.Unlock()
	if result != nil {
		return nil, &TerminalError{JobID: jobID, Status: result.GetStatus()}
	}
	var jm *jobmaster.JobMaster
	if r != nil {
		jm = r.JobMaster()
	}
	if jm == nil {
		return nil, fmt.Errorf("%w: the job has no JobMaster running now (it is initializing, or its leadership changes hands); retry", ErrSavepointNotTaken)
	}
	sp, err := jm.Savepoint(ctx)
	if err != nil {
		return nil, err
	}
	if stop {
		if _, err := d.Cancel(ctx, jobID); err != nil {
			return sp, err // durable, and the job not stopped
		}
	}
	return sp, nil
}

// ErrSavepointNotTaken: a savepoint could not be taken now.
var ErrSavepointNotTaken = errors.New("dispatcher: no savepoint")

// Savepoints lists savepoints in id order, after the id `after`, only
// jobID's unless it is empty.
func (d *Dispatcher) Savepoints(ctx context.Context, jobID, after string, limit int) ([]*hastorev1.Savepoint, error) {
	if _, err := d.current(ctx); err != nil {
		return nil, err
	}
	c, err := d.checkpoints()
	if err != nil {
		return nil, err
	}
	return c.ListSavepoints(ctx, jobID, after, limit)
}

// SavepointJob returns the id of the job a savepoint was taken of, for
// authorization; "" if there is no such savepoint.
func (d *Dispatcher) SavepointJob(ctx context.Context, id string) (string, error) {
	c, err := d.checkpoints()
	if err != nil {
		return "", err
	}
	sp, err := c.GetSavepoint(ctx, id)
	if errors.Is(err, hastore.ErrSavepointNotFound) {
		return "", nil
	}
	return sp.GetJobId(), err
}

// DeleteSavepoint deletes a savepoint, fenced by the Dispatcher's
// leadership.
func (d *Dispatcher) DeleteSavepoint(ctx context.Context, id string) error {
	ld, err := d.current(ctx)
	if err != nil {
		return err
	}
	c, err := d.checkpoints()
	if err != nil {
		return err
	}
	err = c.DeleteSavepoint(ctx, ld.l.Fence(), id)
	if errors.Is(err, hastore.ErrStaleToken) {
		go d.stepDown(ld)
		return ErrNotLeading
	}
	return err
}

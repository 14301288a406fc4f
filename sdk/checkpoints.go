package sdk

import (
	"context"
	"iter"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
)

// Checkpoints returns the job's completed checkpoints that the cluster's
// HA store keeps (the newest `retained` of its CheckpointConfig), in id
// order, and its checkpoint statistics (unset while no JobMaster runs the
// job). A job without checkpoints has neither. An unknown job is
// ErrJobNotFound; a server that keeps no checkpoints answers
// ErrCheckpointsUnsupported.
func (c *Client) Checkpoints(ctx context.Context, jobID string) (*jobplanev1.ListCheckpointsResponse, error) {
	req := &jobplanev1.ListCheckpointsRequest{JobId: jobID}
	return call(ctx, c, true, func(ctx context.Context, d jobplanev1connect.DispatcherServiceClient) (*jobplanev1.ListCheckpointsResponse, error) {
		return d.ListCheckpoints(ctx, req)
	})
}

// A SavepointOption configures TriggerSavepoint.
type SavepointOption func(*savepointOptions)

type savepointOptions struct {
	stop bool
}

// WithStop cancels the job once its savepoint is durable (stop with
// savepoint): the job ends CANCELED, and a job submitted with
// JobConfig.restore_from_savepoint naming the savepoint goes on from
// where it stopped. Default: the job runs on.
func WithStop() SavepointOption { return func(o *savepointOptions) { o.stop = true } }

// TriggerSavepoint takes a savepoint of a running job and returns it once
// it is durable: every running subtask gives its state, and the states
// are kept until DeleteSavepoint, whatever becomes of the job. Its
// SavepointId is what JobConfig.restore_from_savepoint names.
//
// The call is not idempotent, so it is retried only where the cluster
// certainly did nothing (a standby's NOT_LEADER, a connection that could
// not be made). An attempt that got no answer ends the call with its
// error: the savepoint may or may not have been taken (Savepoints lists
// the job's), and with WithStop the job may be ending.
//
// Errors: ErrJobNotFound; ErrJobTerminal for a job that is ending or has
// ended; ErrSavepointFailed when the savepoint could not be taken (the
// job runs on; try again once all its subtasks run);
// ErrCheckpointsUnsupported.
func (c *Client) TriggerSavepoint(ctx context.Context, jobID string, opts ...SavepointOption) (*jobplanev1.SavepointInfo, error) {
	var o savepointOptions
	for _, opt := range opts {
		opt(&o)
	}
	req := &jobplanev1.TriggerSavepointRequest{JobId: jobID, Stop: o.stop}
	return callOnce(ctx, c, func(ctx context.Context, d jobplanev1connect.DispatcherServiceClient) (*jobplanev1.SavepointInfo, error) {
		r, err := d.TriggerSavepoint(ctx, req)
		if err != nil {
			return nil, err
		}
		return r.GetSavepoint(), nil
	})
}

// Savepoints lists the savepoints the cluster keeps, in savepoint id
// order, reading pages as the loop goes: only jobID's unless it is empty
// (whether or not that job still exists). An error ends the sequence:
//
//	for sp, err := range c.Savepoints(ctx, "") {
//		if err != nil { return err }
//		fmt.Println(sp.GetSavepointId(), sp.GetJobId())
//	}
//
// A server that keeps no savepoints answers ErrCheckpointsUnsupported.
func (c *Client) Savepoints(ctx context.Context, jobID string) iter.Seq2[*jobplanev1.SavepointInfo, error] {
	return pages(ctx, c, func(ctx context.Context, d jobplanev1connect.DispatcherServiceClient, token string) ([]*jobplanev1.SavepointInfo, string, error) {
		r, err := d.ListSavepoints(ctx, &jobplanev1.ListSavepointsRequest{JobId: jobID, PageToken: token})
		if err != nil {
			return nil, "", err
		}
		return r.GetSavepoints(), r.GetNextPageToken(), nil
	})
}

// DeleteSavepoint deletes a savepoint. Deleting one that does not exist
// (or no longer does) is no error; jobs that restored from it run on. A
// server that keeps no savepoints answers ErrCheckpointsUnsupported.
func (c *Client) DeleteSavepoint(ctx context.Context, savepointID string) error {
	req := &jobplanev1.DeleteSavepointRequest{SavepointId: savepointID}
	_, err := call(ctx, c, true, func(ctx context.Context, d jobplanev1connect.DispatcherServiceClient) (*jobplanev1.DeleteSavepointResponse, error) {
		return d.DeleteSavepoint(ctx, req)
	})
	return err
}

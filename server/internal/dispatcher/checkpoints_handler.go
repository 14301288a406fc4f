package dispatcher

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/internal/jobmaster"
)

// maxSavepointPageSize is the largest page of ListSavepoints.
const maxSavepointPageSize = 100

// ListCheckpoints implements DispatcherServiceHandler.
func (h *Handler) ListCheckpoints(ctx context.Context, req *jobplanev1.ListCheckpointsRequest) (*jobplanev1.ListCheckpointsResponse, error) {
	if err := checkJobID(req.GetJobId()); err != nil {
		return nil, err
	}
	if err := h.authorize(ctx, jobplanev1connect.DispatcherServiceListCheckpointsProcedure, req.GetJobId()); err != nil {
		return nil, err
	}
	cps, stats, err := h.d.Checkpoints(ctx, req.GetJobId())
	if err != nil {
		return nil, h.wire(ctx, err, req.GetJobId())
	}
	resp := &jobplanev1.ListCheckpointsResponse{Stats: stats}
	for _, cp := range cps {
		resp.Checkpoints = append(resp.Checkpoints, jobmaster.CheckpointInfo(cp))
	}
	return resp, nil
}

// TriggerSavepoint implements DispatcherServiceHandler.
func (h *Handler) TriggerSavepoint(ctx context.Context, req *jobplanev1.TriggerSavepointRequest) (*jobplanev1.TriggerSavepointResponse, error) {
	if err := checkJobID(req.GetJobId()); err != nil {
		return nil, err
	}
	if err := h.authorize(ctx, jobplanev1connect.DispatcherServiceTriggerSavepointProcedure, req.GetJobId()); err != nil {
		return nil, err
	}
	sp, err := h.d.Savepoint(ctx, req.GetJobId(), req.GetStop())
	if err != nil && sp != nil {
		// The savepoint is durable, the cancel failed: the answer says
		// both, with the cancel's reason.
		return nil, withSavepoint(h.wire(ctx, err, req.GetJobId()), sp.GetSavepointId())
	}
	if err != nil {
		return nil, h.wire(ctx, err, req.GetJobId())
	}
	return &jobplanev1.TriggerSavepointResponse{Savepoint: jobmaster.SavepointInfo(sp)}, nil
}

// ListSavepoints implements DispatcherServiceHandler. The page token is
// the last savepoint id of the previous page.
func (h *Handler) ListSavepoints(ctx context.Context, req *jobplanev1.ListSavepointsRequest) (*jobplanev1.ListSavepointsResponse, error) {
	if req.GetJobId() != "" {
		if err := checkJobID(req.GetJobId()); err != nil {
			return nil, err
		}
	}
	size := int(req.GetPageSize())
	switch {
	case size < 0:
		return nil, apierror.BadRequest(apierror.Field{Path: "page_size", Description: "must not be negative"})
	case size == 0, size > maxSavepointPageSize:
		size = maxSavepointPageSize
	}
	if err := h.authorize(ctx, jobplanev1connect.DispatcherServiceListSavepointsProcedure, req.GetJobId()); err != nil {
		return nil, err
	}
	sps, err := h.d.Savepoints(ctx, req.GetJobId(), req.GetPageToken(), size)
	if err != nil {
		return nil, h.wire(ctx, err, req.GetJobId())
	}
	resp := &jobplanev1.ListSavepointsResponse{}
	for _, sp := range sps {
		resp.Savepoints = append(resp.Savepoints, jobmaster.SavepointInfo(sp))
	}
	if len(sps) == size {
		resp.NextPageToken = sps[len(sps)-1].GetSavepointId()
	}
	return resp, nil
}

// DeleteSavepoint implements DispatcherServiceHandler. It is authorized as
// a call about the savepoint's job.
func (h *Handler) DeleteSavepoint(ctx context.Context, req *jobplanev1.DeleteSavepointRequest) (*jobplanev1.DeleteSavepointResponse, error) {
	id := req.GetSavepointId()
	if id == "" || len(id) > hastore.MaxSavepointIDLength {
		return nil, apierror.BadRequest(apierror.Field{Path: "savepoint_id", Description: "want 1 to 128 bytes"})
	}
	jobID, err := h.d.SavepointJob(ctx, id)
	if err != nil {
		return nil, h.wire(ctx, err, "")
	}
	if err := h.authorize(ctx, jobplanev1connect.DispatcherServiceDeleteSavepointProcedure, jobID); err != nil {
		return nil, err
	}
	if err := h.d.DeleteSavepoint(ctx, id); err != nil {
		return nil, h.wire(ctx, err, jobID)
	}
	return &jobplanev1.DeleteSavepointResponse{}, nil
}

// withSavepoint prefixes err's message with the durable savepoint id,
// keeping its code and details.
func withSavepoint(err error, id string) error {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return err
	}
	out := connect.NewError(ce.Code(), fmt.Errorf("savepoint %s is durable, but stopping the job failed: %s", id, ce.Message()))
	for _, d := range ce.Details() {
		out.AddDetail(d)
	}
	return out
}

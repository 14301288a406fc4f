package dispatcher

import (
	"context"
	"errors"
	"strconv"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
	"github.com/jobplane/jobplane/server/internal/jobmaster"
)

// GetTaskOutput implements DispatcherServiceHandler.
func (h *Handler) GetTaskOutput(ctx context.Context, req *jobplanev1.GetTaskOutputRequest) (*jobplanev1.GetTaskOutputResponse, error) {
	if err := checkJobID(req.GetJobId()); err != nil {
		return nil, err
	}
	var fields []apierror.Field
	if req.GetVertexId() == "" {
		fields = append(fields, apierror.Field{Path: "vertex_id", Description: "required"})
	}
	for _, f := range []struct {
		path string
		n    int64
	}{
		{"subtask_index", int64(req.GetSubtaskIndex())}, {"attempt_number", int64(req.GetAttemptNumber())},
		{"offset", req.GetOffset()}, {"max_bytes", int64(req.GetMaxBytes())},
	} {
		if f.n < 0 {
			fields = append(fields, apierror.Field{Path: f.path, Description: "must not be negative"})
		}
	}
	if len(fields) > 0 {
		return nil, apierror.BadRequest(fields...)
	}
	if err := h.authorize(ctx, jobplanev1connect.DispatcherServiceGetTaskOutputProcedure, req.GetJobId()); err != nil {
		return nil, err
	}
	q := OutputQuery{
		JobID: req.GetJobId(), VertexID: req.GetVertexId(), SubtaskIndex: int(req.GetSubtaskIndex()), Attempt: -1,
		Offset: req.GetOffset(), MaxBytes: req.GetMaxBytes(),
	}
	if req.AttemptNumber != nil {
		q.Attempt = int(req.GetAttemptNumber())
	}
	resp, err := h.d.TaskOutput(ctx, q)
	var (
		notFound    *OutputNotFoundError
		unreachable *UnreachableError
	)
	switch {
	case err == nil:
		return resp, nil
	case errors.Is(err, jobmaster.ErrUnknownVertex):
		return nil, apierror.BadRequest(apierror.Field{Path: "vertex_id", Description: "the job has no vertex " + strconv.Quote(q.VertexID)})
	case errors.Is(err, jobmaster.ErrSubtaskOutOfRange):
		return nil, apierror.BadRequest(apierror.Field{Path: "subtask_index", Description: "out of the vertex's range"})
	case errors.As(err, &notFound):
		md := map[string]string{
			"job_id": q.JobID, "vertex_id": q.VertexID, "subtask_index": strconv.Itoa(q.SubtaskIndex),
		}
		if notFound.Attempt >= 0 {
			md["attempt_number"] = strconv.Itoa(notFound.Attempt)
		}
		if notFound.TaskExecutorID != "" {
			md["task_executor_id"] = notFound.TaskExecutorID
		}
		return nil, apierror.New(jobplanev1.ErrorReason_ERROR_REASON_EXECUTION_NOT_FOUND, "no output of the attempt: "+notFound.Why, md)
	case errors.As(err, &unreachable):
		return nil, apierror.New(jobplanev1.ErrorReason_ERROR_REASON_TASK_EXECUTOR_UNREACHABLE,
			"TaskExecutor "+unreachable.TaskExecutorID+" did not answer; retry", map[string]string{"task_executor_id": unreachable.TaskExecutorID})
	}
	return nil, h.wire(ctx, err, q.JobID)
}

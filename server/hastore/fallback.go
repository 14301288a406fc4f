package hastore

import (
	"context"
	"fmt"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
)

// FinishJobInSteps is Store.FinishJob for a backend that has no single
// write for it: s.CreateDirtyJobResult, s.DeleteExecutionPlan and
// s.MarkJobResultClean, in the contract's order, each fenced by f,
// stopping at the first error. An error of CreateDirtyJobResult is
// returned as it is; one of a later step, once the result is recorded,
// is wrapped in a *CleanupPendingError that says which steps are left.
//
// The calls go through s, so a Store that wraps another to watch or
// change its writes passes itself: every step is then seen as if the
// caller had made it.
func FinishJobInSteps(ctx context.Context, s Store, f Fence, result *jobplanev1.JobResult) error {
	if err := s.CreateDirtyJobResult(ctx, f, result); err != nil {
		return err
	}
	jobID := result.GetJobId()
	if err := s.DeleteExecutionPlan(ctx, f, jobID); err != nil {
		return &CleanupPendingError{JobID: jobID, Err: err}
	}
	if err := s.MarkJobResultClean(ctx, f, jobID); err != nil {
		return &CleanupPendingError{JobID: jobID, PlanDeleted: true, Err: err}
	}
	return nil
}

// CleanupPendingError is FinishJob's failure once the job's result is
// recorded (dirty) but its cleanup is not done: DeleteExecutionPlan failed
// or, if PlanDeleted, MarkJobResultClean did. The caller finishes the
// cleanup from that step, as after CreateDirtyJobResult. errors.Is and
// errors.As see Err through it (ErrStaleToken, ErrUnavailable, ...).
type CleanupPendingError struct {
	// JobID is the job's id.
	JobID string
	// PlanDeleted reports that the plan is deleted: only the clean mark is
	// left.
	PlanDeleted bool
	// Err is the failed step's error.
	Err error
}

func (e *CleanupPendingError) Error() string {
	step := "deleting its plan"
	if e.PlanDeleted {
		step = "marking its result clean"
	}
	return fmt.Sprintf("hastore: job %s's result is recorded, but %s failed: %v", e.JobID, step, e.Err)
}

// Unwrap returns the failed step's error.
func (e *CleanupPendingError) Unwrap() error { return e.Err }

// PutExecutionPlanNoLead is Session.PutExecutionPlanAndLead for a backend
// that cannot enter a candidacy in the write that puts a plan: it puts
// the plan with s.PutExecutionPlan, fenced by f, and returns no
// leadership, so that the caller campaigns for the job as usual. s is the
// store the session was opened from (or the Store that wraps it, so that
// the put is seen as the caller's own).
func PutExecutionPlanNoLead(ctx context.Context, s Store, f Fence, plan *hastorev1.ExecutionPlan) (*Leadership, error) {
	return nil, s.PutExecutionPlan(ctx, f, plan)
}

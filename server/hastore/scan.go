package hastore

import (
	"context"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
)

// PlanScanner is implemented by a Store that reads plans with their values
// a page at a time: a new Dispatcher leader then recovers every job with
// one range read per page instead of two point reads per job (the plan
// and its cancel request), which, with a hundred thousand jobs, is what
// keeps a takeover short. Stores that do not implement it are read job
// by job (Store.ListExecutionPlans, GetExecutionPlan and Cancellation).
type PlanScanner interface {
	// ScanExecutionPlans returns the plans of up to limit jobs after the
	// job id `after` ("" for the first page), in job id order, each with
	// its cancel request (nil if none), all as of one moment. A limit of
	// 0 means all.
	ScanExecutionPlans(ctx context.Context, after string, limit int) ([]StoredPlan, error)
}

// StoredPlan is a job's plan and its cancel request, as PlanScanner reads
// them.
type StoredPlan struct {
	Plan *hastorev1.ExecutionPlan
	// Cancellation is the job's cancel request; nil if none.
	Cancellation *jobplanev1.Cancellation
}

// PlanReader is implemented by a Store that reads the plans of several
// named jobs at once: a new Dispatcher leader reads the plans of the jobs
// holding slots on the TaskExecutors before its scan comes to them, so
// that their tasks are adopted within their task lease however many jobs
// wait.
type PlanReader interface {
	// ReadExecutionPlans returns the plans of the jobs of ids that have
	// one, each with its cancel request (nil if none), in no particular
	// order; a job without a plan is left out.
	ReadExecutionPlans(ctx context.Context, ids []string) ([]StoredPlan, error)
}

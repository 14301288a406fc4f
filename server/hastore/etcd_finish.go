package hastore

import (
	"context"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
)

var _ JobFinisher = (*Etcd)(nil)

// FinishJob implements JobFinisher: one fenced transaction puts the result,
// clean, if the job has none, and deletes its plan (and cancel request) in
// the same branch.
func (s *Etcd) FinishJob(ctx context.Context, f Fence, result *jobplanev1.JobResult) error {
	return s.createResult(ctx, f, result, jobplanev1.JobResultState_JOB_RESULT_STATE_CLEAN, s.planDeletes(result.GetJobId())...)
}

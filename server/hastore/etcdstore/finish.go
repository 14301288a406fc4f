package etcdstore

import (
	"context"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/server/hastore"
)

// FinishJob implements hastore.Store in one write: one fenced transaction
// puts the result, clean, if the job has none, and deletes its plan (and
// cancel request) in the same branch. If the job's entry is clean and
// holds an equal result, it succeeds and changes nothing; it fails with
// hastore.ErrResultExists, writing nothing, if the job has any other
// entry (an equal result still dirty among them). It never returns a
// *hastore.CleanupPendingError.
func (s *Store) FinishJob(ctx context.Context, f hastore.Fence, result *jobplanev1.JobResult) error {
	return s.createResult(ctx, f, result, hastorev1.JobResultState_JOB_RESULT_STATE_CLEAN, s.planDeletes(result.GetJobId())...)
}

package hastore

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
)

var _ JobFinisher = (*Etcd)(nil)

// FinishJob implements JobFinisher: one fenced transaction puts the result,
// clean, if the job has none, and deletes its plan in the same branch.
func (s *Etcd) FinishJob(ctx context.Context, f Fence, result *jobplanev1.JobResult) error {
	if err := ValidateResultWrite(f, result); err != nil {
		return err
	}
	data, err := proto.Marshal(&jobplanev1.JobResultEntry{Result: result, State: jobplanev1.JobResultState_JOB_RESULT_STATE_CLEAN})
	if err != nil {
		return fmt.Errorf("hastore: encode result: %w", err)
	}
	key := s.resultKey(result.GetJobId())
	conflict, err := s.fencedCAS(ctx, f, key, 0, clientv3.OpPut(key, string(data)), clientv3.OpDelete(s.planKey(result.GetJobId())))
	if err != nil {
		return err
	}
	if conflict {
		return ErrResultExists
	}
	return nil
}

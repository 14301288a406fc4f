package jobmaster

import (
	"context"
	"sync/atomic"

	"google.golang.org/protobuf/types/known/durationpb"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	"github.com/jobplane/jobplane/gen/jobplane/cluster/v1/clusterv1connect"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
	"github.com/jobplane/jobplane/sdk/wire/batch"
)

// executorClient is the process's one client of a TaskExecutor, which
// every JobMaster here that uses the TaskExecutor shares (see Router): a
// JobMaster holds a pointer, not a client of its own, whose config and
// compression pools would cost tens of kilobytes per job.
//
// It deploys and frees in batches, one call per bounded run of items
// (SubmitTasks, FreeSlots); a TaskExecutor that lacks those calls gets the
// one-item calls instead (batch.Send).
type executorClient struct {
	clusterv1connect.TaskExecutorServiceClient
	// single is set once the TaskExecutor answered a batch call with
	// UNIMPLEMENTED: it gets one-item calls from then on.
	single atomic.Bool
}

// submitTasks deploys attempts of one job, returning the outcome of
// each: nil if deployed, else the error SubmitTask would have answered.
// Each call carries the JobMaster's heartbeat timeout, which a
// TaskExecutor that registered by offering may not have heard yet.
func (c *executorClient) submitTasks(ctx context.Context, jobID string, token *jobplanev1.FencingToken, timeout, lease *durationpb.Duration, tasks []*clusterv1.TaskDeployment) []error {
	return batch.Send(&c.single, tasks, batch.Split,
		func(run []*clusterv1.TaskDeployment) ([]error, error) {
			resp, err := c.SubmitTasks(ctx, &clusterv1.SubmitTasksRequest{JobId: jobID, JobMasterToken: token, Tasks: run, HeartbeatTimeout: timeout, TaskLease: lease})
			return apierror.ItemErrors(len(run), err, resp.GetRefused()), err
		},
		func(d *clusterv1.TaskDeployment) error {
			_, err := c.SubmitTask(ctx, &clusterv1.SubmitTaskRequest{
				JobId: jobID, JobMasterToken: token, AllocationId: d.GetAllocationId(), Attempt: d.GetAttempt(),
				TaskName: d.GetTaskName(), Invokable: d.GetInvokable(), Config: d.GetConfig(), NumberOfSubtasks: d.GetNumberOfSubtasks(),
				RestoredState: d.GetRestoredState(), RestoredFrom: d.GetRestoredFrom(),
				HeartbeatTimeout: timeout, TaskLease: lease,
			})
			return err
		})
}

// freeSlots frees allocations of one job, returning those the
// TaskExecutor confirmed freed.
func (c *executorClient) freeSlots(ctx context.Context, jobID string, token *jobplanev1.FencingToken, allocationIDs []string, reason string) []string {
	errs := batch.Send(&c.single, allocationIDs, batch.Strings,
		func(run []string) ([]error, error) {
			_, err := c.FreeSlots(ctx, &clusterv1.FreeSlotsRequest{JobId: jobID, JobMasterToken: token, AllocationIds: run, Reason: reason})
			return apierror.ItemErrors(len(run), err, nil), err
		},
		func(aid string) error {
			_, err := c.FreeSlot(ctx, &clusterv1.FreeSlotRequest{JobId: jobID, JobMasterToken: token, AllocationId: aid, Reason: reason})
			return err
		})
	var freed []string
	for i, aid := range allocationIDs {
		if errs[i] == nil {
			freed = append(freed, aid)
		}
	}
	return freed
}

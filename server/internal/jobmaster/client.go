package jobmaster

import (
	"context"
	"sync"
	"sync/atomic"

	"connectrpc.com/connect"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
	"github.com/jobplane/jobplane/server/internal/apierror"
	"github.com/jobplane/jobplane/server/internal/batch"
)

// executorClient is the process's one client of a TaskExecutor, which
// every JobMaster here that uses the TaskExecutor shares (see Router): a
// JobMaster holds a pointer, not a client of its own, whose config and
// compression pools would cost tens of kilobytes per job.
//
// It deploys and frees in batches, one call per bounded run of items
// (SubmitTasks, FreeSlots); a TaskExecutor that lacks those calls gets the
// one-item calls instead, at most singleCalls at a time.
type executorClient struct {
	jobplanev1connect.TaskExecutorServiceClient
	// single is set once the TaskExecutor answered a batch call with
	// UNIMPLEMENTED: it gets one-item calls from then on.
	single atomic.Bool
}

// singleCalls bounds the one-item calls in flight for one batch, at a
// TaskExecutor without the batch calls.
const singleCalls = 16

// submitTasks deploys attempts of one job, returning the outcome of
// each: nil if deployed, else the error SubmitTask would have answered.
func (c *executorClient) submitTasks(ctx context.Context, jobID string, token *jobplanev1.FencingToken, tasks []*jobplanev1.TaskDeployment) []error {
	if !c.single.Load() {
		errs := make([]error, 0, len(tasks))
		for i, run := range batch.Split(tasks) {
			resp, err := c.SubmitTasks(ctx, &jobplanev1.SubmitTasksRequest{JobId: jobID, JobMasterToken: token, Tasks: run})
			if i == 0 && connect.CodeOf(err) == connect.CodeUnimplemented {
				c.single.Store(true)
				break
			}
			errs = append(errs, apierror.ItemErrors(len(run), err, resp.GetRefused())...)
		}
		if len(errs) == len(tasks) {
			return errs
		}
	}
	errs := make([]error, len(tasks))
	forEach(len(tasks), func(i int) {
		d := tasks[i]
		_, errs[i] = c.SubmitTask(ctx, &jobplanev1.SubmitTaskRequest{
			JobId: jobID, JobMasterToken: token, AllocationId: d.GetAllocationId(), Attempt: d.GetAttempt(),
			TaskName: d.GetTaskName(), Invokable: d.GetInvokable(), Config: d.GetConfig(), NumberOfSubtasks: d.GetNumberOfSubtasks(),
		})
	})
	return errs
}

// freeSlots frees allocations of one job, returning those the
// TaskExecutor confirmed freed.
func (c *executorClient) freeSlots(ctx context.Context, jobID string, token *jobplanev1.FencingToken, allocationIDs []string, reason string) []string {
	var freed []string
	if !c.single.Load() {
		done := 0
		for i, run := range batch.Strings(allocationIDs) {
			_, err := c.FreeSlots(ctx, &jobplanev1.FreeSlotsRequest{JobId: jobID, JobMasterToken: token, AllocationIds: run, Reason: reason})
			if i == 0 && connect.CodeOf(err) == connect.CodeUnimplemented {
				c.single.Store(true)
				break
			}
			done += len(run)
			if err == nil {
				freed = append(freed, run...)
			}
		}
		if done == len(allocationIDs) {
			return freed
		}
	}
	ok := make([]bool, len(allocationIDs))
	forEach(len(allocationIDs), func(i int) {
		_, err := c.FreeSlot(ctx, &jobplanev1.FreeSlotRequest{JobId: jobID, JobMasterToken: token, AllocationId: allocationIDs[i], Reason: reason})
		ok[i] = err == nil
	})
	for i, aid := range allocationIDs {
		if ok[i] {
			freed = append(freed, aid)
		}
	}
	return freed
}

// forEach calls f(0) … f(n-1), at most singleCalls at a time, and waits
// for them.
func forEach(n int, f func(i int)) {
	sem := make(chan struct{}, singleCalls)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			f(i)
		}()
	}
	wg.Wait()
}

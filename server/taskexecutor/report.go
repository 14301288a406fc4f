package taskexecutor

import (
	"context"
	"errors"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/server/internal/apierror"
	"github.com/jobplane/jobplane/server/internal/batch"
)

// State reports. Each state change of an attempt goes to the JobMaster
// that deployed it, as long as that JobMaster is the job's. Reports are
// per JobMaster, not per change: the changes made while a report to a
// JobMaster is on its way wait, and go together, in order, in the next
// one (UpdateTaskExecutionStates, or one UpdateTaskExecutionState each at
// a JobMaster without it). One sender per JobMaster keeps each attempt's
// changes in the order they happened. A change refused for good (a stale
// token, an attempt the JobMaster no longer knows) stops the attempt; one
// that could not be delivered goes with the next heartbeats to the
// JobMaster's address until one is answered.

// pendingReport is a state change waiting to be reported.
type pendingReport struct {
	t      *task
	status *jobplanev1.TaskExecutionStatus
	done   chan struct{} // closed once delivered or given up
}

// report records a state change of an attempt and queues it for the
// JobMaster that deployed the attempt, if that JobMaster is still the
// job's. The returned channel is closed once the change was delivered or
// given up. Only a task's own goroutine (runTask) calls it, so that Run,
// which waits for those, waits for the sender too.
func (te *TaskExecutor) report(t *task, address string, state jobplanev1.ExecutionState, msg string) <-chan struct{} {
	done := make(chan struct{})
	te.mu.Lock()
	defer te.mu.Unlock()
	t.state, t.failure = state, msg
	jobID := t.req.GetJobId()
	if j := te.jobs[jobID]; j == nil || j.token != t.token {
		close(done)
		return done
	}
	key := jobMasterKey{address: address, jobID: jobID, token: t.token}
	p := &pendingReport{t: t, done: done, status: &jobplanev1.TaskExecutionStatus{
		Attempt: t.req.GetAttempt(), State: state, Time: timestamppb.Now(), FailureMessage: msg,
	}}
	queued, sending := te.reports[key]
	te.reports[key] = append(queued, p)
	if !sending {
		// The caller runs under te.wg, so adding to it is safe even while
		// Run waits for it.
		ctx := context.WithoutCancel(te.ctx)
		te.wg.Add(1)
		go func() {
			defer te.wg.Done()
			te.sendReports(ctx, key)
		}()
	}
	return done
}

// sendReports reports what is queued for a JobMaster, one call at a time,
// until nothing is.
func (te *TaskExecutor) sendReports(ctx context.Context, key jobMasterKey) {
	for {
		te.mu.Lock()
		queued := te.reports[key]
		if len(queued) == 0 {
			delete(te.reports, key)
			te.mu.Unlock()
			return
		}
		te.reports[key] = nil // still sending
		te.mu.Unlock()
		statuses := make([]*jobplanev1.TaskExecutionStatus, len(queued))
		for i, p := range queued {
			statuses[i] = p.status
		}
		at := 0
		for _, run := range batch.Split(statuses) {
			te.deliver(ctx, key, queued[at:at+len(run)], run)
			at += len(run)
		}
		for _, p := range queued {
			close(p.done)
		}
	}
}

// deliver sends state changes to a JobMaster in one call, and acts on the
// answer for each; statuses are those of ps.
func (te *TaskExecutor) deliver(ctx context.Context, key jobMasterKey, ps []*pendingReport, statuses []*jobplanev1.TaskExecutionStatus) {
	sent := time.Now()
	errs, answered := te.jobMaster(key.address).updateStates(ctx, &jobplanev1.UpdateTaskExecutionStatesRequest{
		JobId: key.jobID, JobMasterToken: protoToken(key.token), TaskExecutorId: te.cfg.ID, Statuses: statuses,
	})
	te.mu.Lock()
	defer te.mu.Unlock()
	if answered {
		te.touchLocked(key.jobID, key.token, sent)
	}
	l := te.links[key.address]
	for i, p := range ps {
		if l != nil {
			delete(l.unacked[key.jobID], attemptKey(p.status.GetAttempt()))
		}
		var cerr *connect.Error
		switch err := errs[i]; {
		case err == nil:
		case apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_NOT_LEADER),
			errors.As(err, &cerr) && cerr.Code() != connect.CodeUnavailable && cerr.Code() != connect.CodeDeadlineExceeded:
			te.log.Debug("state report refused; canceling the attempt", "job", key.jobID, "attempt", p.status.GetAttempt(), "err", err)
			p.t.cancel()
		default:
			te.log.Debug("state report failed; it goes with the next heartbeat", "job", key.jobID, "err", err)
			te.unackedLocked(key.address, key.jobID, p.status)
		}
	}
}

// reportTimeout bounds one report call.
const reportTimeout = 10 * time.Second

// updateStates reports state changes of one job in one call, or one call
// each where the JobMasters lack UpdateTaskExecutionStates. It returns the
// outcome of each change, and whether the JobMaster answered at all.
//
// One change per call stops at the first failure that is not the
// change's own (EXECUTION_NOT_FOUND): every change of the request shares
// its job, token and JobMaster, so the rest would fail alike, and a
// JobMaster that does not answer would otherwise hold the rest back for a
// timeout each. The rest get that failure, as with a failed batch call.
func (c *jobMasterClient) updateStates(ctx context.Context, req *jobplanev1.UpdateTaskExecutionStatesRequest) (errs []error, answered bool) {
	if !c.single.Load() {
		rctx, cancel := context.WithTimeout(ctx, reportTimeout)
		resp, err := c.UpdateTaskExecutionStates(rctx, req)
		cancel()
		if connect.CodeOf(err) != connect.CodeUnimplemented {
			return apierror.ItemErrors(len(req.GetStatuses()), err, resp.GetRefused()), err == nil
		}
		c.single.Store(true)
	}
	errs = make([]error, len(req.GetStatuses()))
	var failed error
	for i, st := range req.GetStatuses() {
		if failed != nil {
			errs[i] = failed
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, reportTimeout)
		_, errs[i] = c.UpdateTaskExecutionState(rctx, &jobplanev1.UpdateTaskExecutionStateRequest{
			JobId: req.GetJobId(), JobMasterToken: req.GetJobMasterToken(), TaskExecutorId: req.GetTaskExecutorId(), Status: st,
		})
		cancel()
		switch {
		case errs[i] == nil:
			answered = true
		case apierror.Is(errs[i], jobplanev1.ErrorReason_ERROR_REASON_EXECUTION_NOT_FOUND):
			answered = true
		default:
			failed = errs[i]
		}
	}
	return errs, answered
}

package taskexecutor

import (
	"context"
	"errors"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
	"github.com/jobplane/jobplane/sdk/wire/batch"
)

// State reports. Each state change of an attempt goes to the JobMaster
// that deployed it, as long as that JobMaster is the job's. Reports are
// per JobMaster process, not per change or per job: the changes made
// while a report to an address is on its way wait, and go together, in
// order, in the next call, for every job reported there
// (UpdateTaskExecutionStatesOfJobs; at a process without it, one
// UpdateTaskExecutionStates per job, or one UpdateTaskExecutionState per
// change where that is missing too). One sender per address keeps each
// attempt's changes in the order they happened. A change refused for good
// (a stale token, an attempt the JobMaster no longer knows) stops the
// attempt; one that could not be delivered goes with the next heartbeats
// to the JobMaster's address until one is answered.

// pendingReport is a state change waiting to be reported.
type pendingReport struct {
	key    jobMasterKey
	t      *task
	status *jobplanev1.TaskExecutionStatus
	done   chan struct{} // closed once delivered or given up
}

// report records a state change of an attempt and queues it for the
// JobMaster that deployed (or adopted) the attempt, if that JobMaster is still the
// job's. The returned channel is closed once the change was delivered or
// given up. Only a task's own goroutine (runTask) calls it, so that Run,
// which waits for those, waits for the sender too.
func (te *TaskExecutor) report(t *task, state jobplanev1.ExecutionState, msg string) <-chan struct{} {
	done := make(chan struct{})
	te.mu.Lock()
	defer te.mu.Unlock()
	t.state, t.failure = state, msg
	jobID, address := t.req.GetJobId(), t.address
	if j := te.jobs[jobID]; j == nil || j.token != t.token {
		close(done)
		return done
	}
	status := t.statusLocked()
	status.Time = timestamppb.Now()
	p := &pendingReport{key: jobMasterKey{address: address, jobID: jobID, token: t.token}, t: t, done: done, status: status}
	queued, sending := te.reports[address]
	te.reports[address] = append(queued, p)
	if !sending {
		// The caller runs under te.wg, so adding to it is safe even while
		// Run waits for it.
		ctx := context.WithoutCancel(te.ctx)
		te.wg.Add(1)
		go func() {
			defer te.wg.Done()
			te.sendReports(ctx, address)
		}()
	}
	return done
}

// reportEntry is the state changes of one job for one JobMaster, oldest
// first, that go in one call, and that call's request.
type reportEntry struct {
	key jobMasterKey
	ps  []*pendingReport
	req *clusterv1.UpdateTaskExecutionStatesRequest
}

// entries groups queued state changes by JobMaster, in the order each
// first appears, and cuts a JobMaster's changes into runs that each fit
// one call (batch.Split); the runs of one JobMaster stay in order.
func entries(executor string, queued []*pendingReport) []reportEntry {
	var keys []jobMasterKey
	byKey := map[jobMasterKey][]*pendingReport{}
	for _, p := range queued {
		if byKey[p.key] == nil {
			keys = append(keys, p.key)
		}
		byKey[p.key] = append(byKey[p.key], p)
	}
	var out []reportEntry
	for _, k := range keys {
		ps := byKey[k]
		statuses := make([]*jobplanev1.TaskExecutionStatus, len(ps))
		for i, p := range ps {
			statuses[i] = p.status
		}
		at := 0
		for _, run := range batch.Split(statuses) {
			out = append(out, reportEntry{key: k, ps: ps[at : at+len(run)], req: &clusterv1.UpdateTaskExecutionStatesRequest{
				JobId: k.jobID, JobMasterToken: protoToken(k.token), TaskExecutorId: executor, Statuses: run,
			}})
			at += len(run)
		}
	}
	return out
}

// sendReports reports what is queued for a JobMaster process, one call
// at a time, until nothing is.
func (te *TaskExecutor) sendReports(ctx context.Context, address string) {
	for {
		te.mu.Lock()
		queued := te.reports[address]
		if len(queued) == 0 {
			delete(te.reports, address)
			te.mu.Unlock()
			return
		}
		te.reports[address] = nil // still sending
		te.mu.Unlock()
		es := entries(te.cfg.ID, queued)
		jm := te.jobMaster(address)
		if !jm.perJob.Load() {
			es = te.deliverTogether(ctx, jm, es)
		}
		for _, e := range es {
			te.deliver(ctx, jm, e)
		}
		for _, p := range queued {
			close(p.done)
		}
	}
}

// deliverTogether sends the entries for one address in as few calls of
// UpdateTaskExecutionStatesOfJobs as the limits allow. It returns the
// entries it did not send because the process lacks that call (which
// jm then remembers).
func (te *TaskExecutor) deliverTogether(ctx context.Context, jm *jobMasterClient, es []reportEntry) (unsent []reportEntry) {
	reqs := make([]*clusterv1.UpdateTaskExecutionStatesRequest, len(es))
	for i, e := range es {
		reqs[i] = e.req
	}
	at := 0
	for _, run := range batch.Split(reqs) {
		sent := time.Now()
		rctx, cancel := context.WithTimeout(ctx, reportTimeout)
		resp, err := jm.UpdateTaskExecutionStatesOfJobs(rctx, &clusterv1.UpdateTaskExecutionStatesOfJobsRequest{TaskExecutorId: te.cfg.ID, Jobs: run})
		cancel()
		if connect.CodeOf(err) == connect.CodeUnimplemented {
			jm.perJob.Store(true)
			return es[at:]
		}
		if err != nil {
			// A failure of the call as a whole is no one job's: its
			// changes go with the next heartbeats, as undelivered
			// ones do, rather than stop every attempt in the call.
			err = connect.NewError(connect.CodeUnavailable, err)
		}
		whole := apierror.ItemErrors(len(run), err, resp.GetRefused())
		for i, e := range es[at : at+len(run)] {
			var refused []*jobplanev1.ItemError
			if i < len(resp.GetResults()) {
				refused = resp.GetResults()[i].GetRefused()
			}
			te.settle(e, apierror.ItemErrors(len(e.ps), whole[i], refused), whole[i] == nil, sent)
		}
		at += len(run)
	}
	return nil
}

// deliver sends one entry's state changes to its JobMaster in one call
// (or one per change, see updateStates).
func (te *TaskExecutor) deliver(ctx context.Context, jm *jobMasterClient, e reportEntry) {
	sent := time.Now()
	errs, answered := jm.updateStates(ctx, e.req)
	te.settle(e, errs, answered, sent)
}

// settle acts on the outcome of each of an entry's state changes: errs
// are their errors; answered says the JobMaster answered the call sent
// at sent.
func (te *TaskExecutor) settle(e reportEntry, errs []error, answered bool, sent time.Time) {
	key := e.key
	te.mu.Lock()
	defer te.mu.Unlock()
	if answered {
		te.touchLocked(key.jobID, key.token, sent)
	}
	l := te.links[key.address]
	for i, p := range e.ps {
		if l != nil {
			delete(l.unacked[key.jobID], attemptKey(p.status.GetAttempt()))
		}
		var cerr *connect.Error
		switch err := errs[i]; {
		case err == nil:
		case p.t.token != key.token:
			// The attempt was adopted by a newer JobMaster while the
			// report was with the one it was sent to: that JobMaster's
			// answer, whatever it is, says nothing of the attempt now,
			// whose state went to the new one with the adoption.
			te.log.Debug("state report answered by a JobMaster that no longer has the attempt; dropped", "job", key.jobID, "attempt", p.status.GetAttempt(), "err", err)
		case apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_NOT_LEADER) && te.underLeaseLocked(key.jobID):
			// A JobMaster deposed under a task lease leaves its attempts
			// to its successor, which adopts them: the attempt runs on
			// until then, or until the lease ends (held.go), and its
			// state goes with the adoption or the next heartbeat.
			te.log.Debug("state report refused by a deposed JobMaster under a task lease; the attempt is kept for adoption", "job", key.jobID, "attempt", p.status.GetAttempt(), "err", err)
			te.unackedLocked(key.address, key.jobID, key.token, p.status)
		case apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_NOT_LEADER),
			errors.As(err, &cerr) && cerr.Code() != connect.CodeUnavailable && cerr.Code() != connect.CodeDeadlineExceeded:
			te.log.Debug("state report refused; canceling the attempt", "job", key.jobID, "attempt", p.status.GetAttempt(), "err", err)
			p.t.cancel()
		default:
			te.log.Debug("state report failed; it goes with the next heartbeat", "job", key.jobID, "err", err)
			te.unackedLocked(key.address, key.jobID, key.token, p.status)
		}
	}
}

// underLeaseLocked says whether the job's attempts run under a task lease
// (granted, or adopted under one): a newer JobMaster adopts them rather
// than deploying them again. te.mu must be held.
func (te *TaskExecutor) underLeaseLocked(jobID string) bool {
	j := te.jobs[jobID]
	return j != nil && (j.taskLease > 0 || !j.adoptedUntil.IsZero())
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
func (c *jobMasterClient) updateStates(ctx context.Context, req *clusterv1.UpdateTaskExecutionStatesRequest) (errs []error, answered bool) {
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
		_, errs[i] = c.UpdateTaskExecutionState(rctx, &clusterv1.UpdateTaskExecutionStateRequest{
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

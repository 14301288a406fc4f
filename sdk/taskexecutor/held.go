package taskexecutor

import (
	"context"
	"fmt"
	"time"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
)

// Under a task lease (JobMasterService.HeartbeatFromTaskExecutorResponse
// .task_lease), a newer JobMaster of a job does not cancel the older
// one's attempts: they are held, running, for it to adopt
// (TaskExecutorService.AdoptAttempts), until the deadline they had under
// their own token, which nothing extends. Held, an attempt reports
// nothing (its token is not the job's), keeps its slot (which is offered
// to nobody), and ends as it would; adopted, it runs under the newer
// token, reports there, and the older token is refused for it. One that
// no JobMaster adopts by its deadline is canceled and its slot freed.
//
// Why no subtask runs twice at once: the server grants a task lease only
// while it leads, so an attempt under an older token stops by the end of
// that leadership's validity plus the lease; a newer leader is granted
// only after that validity ended, and deploys anew only what no answer to
// AdoptAttempts listed, once the longest lease the older leader could
// have granted has ended too.

// heldLocked says whether slot s holds an attempt held for the job's
// newer JobMaster. te.mu must be held.
func heldLocked(s *slot, j *job) bool {
	return s.task != nil && !s.task.heldUntil.IsZero() && s.task.token != j.token
}

// keepForAdoptionLocked, called as a newer JobMaster of the job appears,
// holds the attempts of the current one if it granted a task lease (or
// adopted them), until the job's deadline now; it returns the slots held,
// those held for an older one included. te.mu must be held.
func (te *TaskExecutor) keepForAdoptionLocked(jobID string, j *job) map[*slot]bool {
	held := map[*slot]bool{}
	until := time.Time{}
	// Attempts this JobMaster adopted run as long as they were held, even
	// before it granted a lease of its own (its first heartbeat answer
	// may come later than the adoption).
	if j.taskLease > 0 || !j.adoptedUntil.IsZero() {
		if d := te.deadlineLocked(j); d.After(time.Now()) {
			until = d
		}
	}
	for _, s := range te.slots {
		if s.jobID != jobID || s.task == nil {
			continue
		}
		switch t := s.task; {
		case !t.heldUntil.IsZero():
			held[s] = true
		case !until.IsZero() && t.token == j.token:
			t.heldUntil = until
			held[s] = true
		}
	}
	if len(held) > 0 {
		te.log.Info("newer JobMaster; holding the older one's attempts for it to adopt", "job", jobID, "attempts", len(held), "until", until)
		te.wakeWatchdog()
	}
	return held
}

// expireHeldLocked cancels the held attempts whose deadline has come,
// freeing their slots, and returns the earliest deadline still to come.
// te.mu must be held.
func (te *TaskExecutor) expireHeldLocked(now time.Time) (next time.Time) {
	for _, s := range te.slots {
		j := te.jobs[s.jobID]
		if j == nil || !heldLocked(s, j) {
			continue
		}
		if until := s.task.heldUntil; now.Before(until) {
			if next.IsZero() || until.Before(next) {
				next = until
			}
			continue
		}
		s.task.heldUntil = time.Time{}
		te.log.Warn("no JobMaster adopted a held attempt within its task lease; canceled it and freed its slot",
			"job", s.jobID, "attempt", attemptKey(s.task.req.GetAttempt()), "token", s.task.token)
		te.releaseLocked(s, "held for a newer JobMaster past its task lease, and not adopted")
	}
	return next
}

// AdoptAttempts implements TaskExecutorService.AdoptAttempts.
func (h *handler) AdoptAttempts(ctx context.Context, req *clusterv1.AdoptAttemptsRequest) (*clusterv1.AdoptAttemptsResponse, error) {
	te := h.te
	var bad []apierror.Field
	for i, e := range req.GetJobs() {
		for _, f := range jobFields(e.GetJobId(), e.GetJobMasterToken()) {
			f.Path = fmt.Sprintf("jobs[%d].%s", i, f.Path)
			bad = append(bad, f)
		}
		if e.GetJobMasterAddress() == "" {
			bad = append(bad, apierror.Field{Path: fmt.Sprintf("jobs[%d].job_master_address", i), Description: "required"})
		}
	}
	if len(req.GetJobs()) == 0 {
		bad = append(bad, apierror.Field{Path: "jobs", Description: "required"})
	}
	if len(bad) > 0 {
		return nil, apierror.BadRequest(bad...)
	}
	te.mu.Lock()
	defer te.mu.Unlock()
	// An entry for a job that holds nothing here has nothing to hand
	// over: it is answered empty at once, its token neither read from the
	// store nor taken (the contract's MAY). A JobMaster that took over
	// many jobs asks every TaskExecutor about each of them, and most hold
	// nothing on most TaskExecutors: a store read each would flood the
	// store just as the new leader recovers. An older token than the
	// job's current one is still refused, as it needs no read.
	// Only the jobs the call names are looked up among the slots: a
	// TaskExecutor of a thousand slots asked about 256 jobs at a time
	// would otherwise build a map of every job it holds for each call.
	holding := make(map[string]bool, len(req.GetJobs()))
	for _, e := range req.GetJobs() {
		holding[e.GetJobId()] = false
	}
	for _, s := range te.slots {
		if _, named := holding[s.jobID]; named && !s.freeing {
			holding[s.jobID] = true
		}
	}
	tokens := make([]jobToken, 0, len(req.GetJobs()))
	empty := make([]bool, len(req.GetJobs()))
	for i, e := range req.GetJobs() {
		t := tokenOf(e.GetJobMasterToken())
		if !holding[e.GetJobId()] && !te.olderLocked(e.GetJobId(), t) {
			empty[i] = true
			continue
		}
		tokens = append(tokens, jobToken{e.GetJobId(), t})
	}
	checks := te.checkJobsLocked(ctx, tokens)
	checked := make([]error, len(req.GetJobs()))
	for i, k := 0, 0; i < len(checked); i++ {
		if !empty[i] {
			checked[i], k = checks[k], k+1
		}
	}
	for _, err := range checked {
		if err != nil && !apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_STALE_FENCING_TOKEN) {
			return nil, err // the store could not be read: nothing was taken, the JobMaster retries
		}
	}
	// A held attempt past its deadline stops before anything is taken.
	te.expireHeldLocked(time.Now())
	resp := &clusterv1.AdoptAttemptsResponse{}
	for i, e := range req.GetJobs() {
		out := &clusterv1.AdoptedJob{JobId: e.GetJobId()}
		resp.Jobs = append(resp.Jobs, out)
		token := tokenOf(e.GetJobMasterToken())
		if empty[i] {
			continue
		}
		if checked[i] != nil {
			resp.Refused = append(resp.Refused, apierror.Item(i, checked[i]))
			continue
		}
		if current, ok := te.adoptLocked(e.GetJobId(), token, e.GetJobMasterAddress()); !ok {
			resp.Refused = append(resp.Refused, apierror.Item(i, staleJob(e.GetJobId(), current)))
			continue
		}
		te.admitLocked(e.GetJobId(), token)
		te.adoptAttemptsLocked(te.jobs[e.GetJobId()], out, token, e.GetJobMasterAddress())
	}
	return resp, nil
}

// adoptAttemptsLocked moves the job's held attempts to token, and lists
// in out every attempt and allocation the job holds here under it. te.mu
// must be held.
func (te *TaskExecutor) adoptAttemptsLocked(j *job, out *clusterv1.AdoptedJob, token election.Token, address string) {
	for _, s := range te.slots {
		if s.jobID != out.GetJobId() || s.freeing {
			continue
		}
		out.AllocationIds = append(out.AllocationIds, s.allocationID)
		t := s.task
		if t == nil || t.token != token && t.heldUntil.IsZero() {
			continue // none, or an older attempt being canceled
		}
		if t.heldUntil.After(j.adoptedUntil) {
			j.adoptedUntil = t.heldUntil
		}
		t.token, t.address, t.heldUntil = token, address, time.Time{}
		out.Attempts = append(out.Attempts, &clusterv1.HeldAttempt{
			AllocationId:  s.allocationID,
			DeployedUnder: protoToken(t.deployed),
			Status:        t.statusLocked(),
		})
	}
}

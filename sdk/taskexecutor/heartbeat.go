package taskexecutor

import (
	"context"
	"fmt"
	"sync"
	"time"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
)

// The per-pair heartbeat with JobMaster processes
// (JobMasterService.HeartbeatFromTaskExecutor): once per heartbeat
// interval, one call to each address whose JobMasters this TaskExecutor
// follows, for all their jobs at once, carrying only what changed since
// the last heartbeat that address answered. A job is followed at its
// JobMaster's address while it holds slots here. Each answered heartbeat
// counts as hearing from the JobMasters of the jobs it covers, as of when
// it was sent (see watchdog.go); the answer may grant a lease that bounds
// that too.

// link is this TaskExecutor's side of the heartbeat with one address.
type link struct {
	full     bool                      // the next heartbeat lists everything
	told     map[string]election.Token // what the process knows this TaskExecutor follows
	complete map[string]bool           // jobs to report complete next
	// unacked are state changes whose own report failed, by job and
	// attempt, sent with the next heartbeats until one is answered, as
	// long as the JobMaster they were for is still the job's.
	unacked map[string]map[string]unackedStatus
}

// unackedStatus is a state change whose report failed, and the token of
// the JobMaster it was for. A newer JobMaster of the job, even at the same
// address, numbers its attempts anew: an older one's change is not about
// its attempts, and is dropped.
type unackedStatus struct {
	token  election.Token
	status *jobplanev1.TaskExecutionStatus
}

// linkLocked returns the link to address, made if new; te.mu must be held.
func (te *TaskExecutor) linkLocked(address string) *link {
	l := te.links[address]
	if l == nil {
		l = &link{full: true, told: map[string]election.Token{}, complete: map[string]bool{}, unacked: map[string]map[string]unackedStatus{}}
		te.links[address] = l
	}
	return l
}

// unackedLocked keeps a state change whose report failed, for the next
// heartbeats to its JobMaster's address; te.mu must be held.
func (te *TaskExecutor) unackedLocked(address, jobID string, token election.Token, st *jobplanev1.TaskExecutionStatus) {
	l := te.linkLocked(address)
	m := l.unacked[jobID]
	if m == nil {
		m = map[string]unackedStatus{}
		l.unacked[jobID] = m
	}
	m[attemptKey(st.GetAttempt())] = unackedStatus{token: token, status: st}
}

func attemptKey(a *jobplanev1.ExecutionAttemptId) string {
	return fmt.Sprintf("%s/%d/%d", a.GetVertexId(), a.GetSubtaskIndex(), a.GetAttemptNumber())
}

// followedLocked returns the jobs followed at each address: those holding
// a slot here whose JobMaster's address is known. te.mu must be held.
func (te *TaskExecutor) followedLocked() map[string]map[string]election.Token {
	out := map[string]map[string]election.Token{}
	for _, s := range te.slots {
		if s.jobID == "" {
			continue
		}
		j := te.jobs[s.jobID]
		if j == nil || j.address == "" || j.token.IsZero() {
			continue
		}
		if out[j.address] == nil {
			out[j.address] = map[string]election.Token{}
		}
		out[j.address][s.jobID] = j.token
	}
	return out
}

// completeLocked reports everything held here for a job under token;
// te.mu must be held.
func (te *TaskExecutor) completeLocked(jobID string, token election.Token) *clusterv1.TaskExecutorJobReport {
	r := &clusterv1.TaskExecutorJobReport{JobId: jobID, JobMasterToken: protoToken(token), Following: true, Complete: true}
	for _, s := range te.slots {
		if s.jobID != jobID || heldLocked(s, te.jobs[jobID]) {
			continue // held for this JobMaster to adopt: not yet under its token
		}
		r.AllocationIds = append(r.AllocationIds, s.allocationID)
		if t := s.task; t != nil && t.token == token {
			r.Attempts = append(r.Attempts, t.statusLocked())
		}
	}
	return r
}

// heartbeatRequestLocked builds the heartbeat to address from what is
// followed there now; te.mu must be held.
func (te *TaskExecutor) heartbeatRequestLocked(address string, followed map[string]election.Token) *clusterv1.HeartbeatFromTaskExecutorRequest {
	l := te.linkLocked(address)
	req := &clusterv1.HeartbeatFromTaskExecutorRequest{TaskExecutorId: te.cfg.ID, Address: te.cfg.Address, Full: l.full}
	for jobID, token := range followed {
		switch {
		case l.full || l.complete[jobID]:
			req.Jobs = append(req.Jobs, te.completeLocked(jobID, token))
		case l.told[jobID] != token || len(l.unacked[jobID]) > 0:
			r := &clusterv1.TaskExecutorJobReport{JobId: jobID, JobMasterToken: protoToken(token), Following: true}
			for k, u := range l.unacked[jobID] {
				if u.token != token {
					delete(l.unacked[jobID], k) // an older JobMaster's
					continue
				}
				r.Attempts = append(r.Attempts, u.status)
			}
			req.Jobs = append(req.Jobs, r)
		}
	}
	if !l.full {
		for jobID := range l.told {
			if _, ok := followed[jobID]; !ok {
				req.Jobs = append(req.Jobs, &clusterv1.TaskExecutorJobReport{JobId: jobID, Following: false})
			}
		}
	}
	return req
}

// heartbeatJobMasters sends the heartbeats once per heartbeat interval
// until ctx ends.
func (te *TaskExecutor) heartbeatJobMasters(ctx context.Context) {
	timer := time.NewTimer(te.heartbeatInterval())
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-te.hbWake:
			timer.Reset(te.heartbeatInterval())
			continue
		case <-timer.C:
		}
		te.heartbeatRound(ctx)
		timer.Reset(te.heartbeatInterval())
	}
}

// heartbeatInterval is the shortest interval a JobMaster asked for (1s
// before any did).
func (te *TaskExecutor) heartbeatInterval() time.Duration {
	te.mu.Lock()
	defer te.mu.Unlock()
	if te.hbInterval <= 0 {
		return time.Second
	}
	return te.hbInterval
}

// heartbeatRound sends one heartbeat to every address with jobs followed,
// or with jobs it must hear are no longer followed, and applies the
// answers.
func (te *TaskExecutor) heartbeatRound(ctx context.Context) {
	type call struct {
		address  string
		req      *clusterv1.HeartbeatFromTaskExecutorRequest
		followed map[string]election.Token
	}
	var calls []call
	te.mu.Lock()
	followed := te.followedLocked()
	for address, l := range te.links {
		if _, ok := followed[address]; !ok && len(l.told) == 0 {
			delete(te.links, address) // nothing followed there any more, and it knows
		}
	}
	for address := range te.links {
		if _, ok := followed[address]; !ok {
			followed[address] = map[string]election.Token{}
		}
	}
	for address, jobs := range followed {
		calls = append(calls, call{address, te.heartbeatRequestLocked(address, jobs), jobs})
	}
	te.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sent := time.Now()
			cctx, cancel := context.WithTimeout(ctx, te.heartbeatInterval()*2)
			resp, err := te.jobMaster(c.address).HeartbeatFromTaskExecutor(cctx, c.req)
			cancel()
			if err != nil {
				if ctx.Err() == nil {
					te.log.Debug("heartbeat to JobMasters failed", "address", c.address, "err", err)
				}
				return
			}
			te.mu.Lock()
			defer te.mu.Unlock()
			te.heardLocked(c.address, c.req, c.followed, sent, resp)
		}()
	}
	wg.Wait()
}

// heardLocked applies the answer to a heartbeat sent at sent; te.mu must
// be held.
func (te *TaskExecutor) heardLocked(address string, req *clusterv1.HeartbeatFromTaskExecutorRequest, followed map[string]election.Token, sent time.Time, resp *clusterv1.HeartbeatFromTaskExecutorResponse) {
	l := te.linkLocked(address)
	// What the process knows now.
	if req.GetFull() {
		l.full = false
		clear(l.told)
	}
	listed := map[string]bool{}
	for _, r := range req.GetJobs() {
		listed[r.GetJobId()] = true
		if r.GetFollowing() {
			l.told[r.GetJobId()] = tokenOf(r.GetJobMasterToken())
		} else {
			delete(l.told, r.GetJobId())
		}
		if r.GetComplete() {
			delete(l.complete, r.GetJobId())
		}
		for _, st := range r.GetAttempts() {
			delete(l.unacked[r.GetJobId()], attemptKey(st.GetAttempt()))
		}
		if len(l.unacked[r.GetJobId()]) == 0 {
			delete(l.unacked, r.GetJobId())
		}
	}
	if resp.GetFullRequested() {
		l.full = true
	}
	named := map[string]bool{}
	for _, a := range resp.GetJobs() {
		named[a.GetJobId()] = true
		j := te.jobs[a.GetJobId()]
		switch a.GetAction() {
		case clusterv1.TaskExecutorJobAction_TASK_EXECUTOR_JOB_ACTION_NOT_LEADER:
			delete(l.told, a.GetJobId())
			if j != nil && j.address == address && j.token == followed[a.GetJobId()] {
				// No JobMaster of the job here: it is not heard, and the
				// watchdog stops its attempts unless a newer JobMaster
				// shows up (through the ResourceManager).
				j.address = ""
			}
		case clusterv1.TaskExecutorJobAction_TASK_EXECUTOR_JOB_ACTION_FOLLOW:
			te.adoptLocked(a.GetJobId(), tokenOf(a.GetJobMasterToken()), address)
		case clusterv1.TaskExecutorJobAction_TASK_EXECUTOR_JOB_ACTION_REPORT:
			l.complete[a.GetJobId()] = true
		}
	}
	var lease time.Time
	if d := resp.GetLeaseRemaining(); d != nil {
		lease = sent.Add(d.AsDuration())
	}
	sooner := false
	for jobID, token := range followed {
		if named[jobID] && !l.complete[jobID] || resp.GetFullRequested() && !listed[jobID] {
			continue // not vouched for by this answer
		}
		te.touchLocked(jobID, token, sent)
		if j := te.jobs[jobID]; j != nil && j.token == token {
			before := te.deadlineLocked(j)
			j.taskLease = resp.GetTaskLease().AsDuration()
			if !lease.IsZero() {
				j.leaseUntil = lease
			}
			if after := te.deadlineLocked(j); !after.IsZero() && (before.IsZero() || after.Before(before)) {
				sooner = true
			}
		}
	}
	if sooner {
		te.wakeWatchdog() // a shorter lease brought a deadline forward
	}
}

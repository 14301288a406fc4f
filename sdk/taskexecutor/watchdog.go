package taskexecutor

import (
	"context"
	"fmt"
	"time"

	"github.com/jobplane/jobplane/sdk/election"
)

// A TaskExecutor runs a job's tasks only while it hears from the job's
// JobMaster. The JobMaster counts a TaskExecutor it has not heard from for
// its heartbeat timeout as lost, and may deploy the lost attempts again
// elsewhere once that TaskExecutor has certainly stopped them; this side
// keeps that promise. A job whose JobMaster was last heard (see
// job.contact) longer ago than the timeout, less the cancel grace, has its
// tasks canceled and its slots freed, so that they have stopped by the
// timeout. The same holds after a stall of this process: silence that
// lasted past the deadline stops the tasks before any later message from
// the JobMaster is taken, because the JobMaster may have given them up
// meanwhile. This also frees slots that a JobMaster gave up while this
// TaskExecutor could not be reached.

// grace is how long before a JobMaster's heartbeat timeout its tasks are
// canceled: the cancel grace, at most a third of the timeout, so that the
// JobMaster's silence is tolerated for two thirds of the timeout.
func (te *TaskExecutor) grace(timeout time.Duration) time.Duration {
	return min(te.cfg.CancelGrace, timeout/3)
}

// deadlineLocked is when the job's tasks must start stopping: the
// heartbeat timeout after the JobMaster was last heard, or the end of the
// lease its last heartbeat answer granted, whichever comes first, less
// the cancel grace. Zero when no deadline applies (no JobMaster
// registered yet). te.mu must be held.
func (te *TaskExecutor) deadlineLocked(j *job) time.Time {
	var d time.Time
	switch {
	case j.contact.IsZero():
	case j.taskLease > 0:
		d = j.contact.Add(j.taskLease - te.grace(j.taskLease))
	case j.timeout > 0:
		end := j.contact.Add(j.timeout)
		if !j.leaseUntil.IsZero() && j.leaseUntil.Before(end) {
			end = j.leaseUntil
		}
		d = end.Add(-te.grace(j.timeout))
	}
	if !d.IsZero() && j.adoptedUntil.After(d) {
		d = j.adoptedUntil // adopted attempts run as long as they were held
	}
	return d
}

// registered records that the job's JobMaster of token took this
// TaskExecutor's registration, sent at sent, with its heartbeat interval
// and timeout.
func (te *TaskExecutor) registered(jobID string, token election.Token, sent time.Time, interval, timeout, lease time.Duration) {
	te.mu.Lock()
	defer te.mu.Unlock()
	te.registeredLocked(jobID, token, sent, interval, timeout, lease)
}

// followDeploymentLocked admits a deployment from the job's JobMaster
// of token, as followLocked admits any call, with the JobMaster's
// heartbeat timeout that the deployment carries. The deployment may come
// before the answer to the offer that registered this TaskExecutor: its
// timeout then arms the watchdog, counted from when that offer was sent
// (the JobMaster heard this TaskExecutor no earlier), and a deadline
// already past stops the job's tasks and frees its slots before the
// deployment is taken, as the JobMaster may have given them up. With no
// timeout known at all, the deployment is refused: its attempt could
// outlive the JobMaster. te.mu must be held.
func (te *TaskExecutor) followDeploymentLocked(jobID string, token election.Token, timeout, lease time.Duration) error {
	current, ok := te.adoptLocked(jobID, token, "")
	if !ok {
		return staleJob(jobID, current)
	}
	j := te.jobs[jobID]
	if lease > 0 && j.held > 0 {
		j.taskLease = lease
	}
	switch {
	case timeout <= 0 || j.held == 0:
		// (A job holding nothing here gets no deadline: the deployment
		// finds no slot.)
	case j.timeout <= 0:
		te.registeredLocked(jobID, token, j.offered, 0, timeout, lease)
	case j.provisional:
		j.timeout, j.provisional = timeout, false
		te.wakeWatchdog()
	}
	te.admitLocked(jobID, token)
	return nil
}

// registeredLocked is registered with te.mu held.
func (te *TaskExecutor) registeredLocked(jobID string, token election.Token, sent time.Time, interval, timeout, lease time.Duration) {
	if interval > 0 && (te.hbInterval <= 0 || interval < te.hbInterval) {
		te.hbInterval = interval
		select {
		case te.hbWake <- struct{}{}:
		default:
		}
	}
	j := te.jobs[jobID]
	if j == nil || j.token != token || timeout <= 0 {
		return
	}
	if lease > 0 {
		j.taskLease = lease // the job's attempts run under the lease from the start
	}
	if j.timeout > 0 {
		j.timeout, j.provisional = timeout, false
		te.touchLocked(jobID, token, sent)
		te.wakeWatchdog() // the deadline may come sooner
		return
	}
	// The first deadline for what the job holds here now: it counts from
	// the later of this contact and any before, and may come before the
	// one the watchdog waits for.
	j.timeout, j.provisional = timeout, false
	if sent.After(j.contact) {
		j.contact = sent
	}
	te.wakeWatchdog()
}

// wakeWatchdog has the watchdog look at the deadlines again: one may have
// come sooner than the one its timer waits for.
func (te *TaskExecutor) wakeWatchdog() {
	select {
	case te.wake <- struct{}{}:
	default:
	}
}

// admitLocked checks, for a call from the job's JobMaster of token, that
// the job's deadline has not passed; if it has, the job's tasks stop
// first (the JobMaster may have given them up). The call itself is not
// contact: the JobMaster counts only what it hears from this
// TaskExecutor, so only answers to this TaskExecutor's own calls move the
// deadline (touchLocked, from when they were sent). te.mu must be held.
func (te *TaskExecutor) admitLocked(jobID string, token election.Token) {
	if j := te.jobs[jobID]; j != nil && j.token == token {
		if d := te.deadlineLocked(j); !d.IsZero() && !time.Now().Before(d) {
			te.expireLocked(jobID, j)
		}
	}
}

// touchLocked records contact at `at` with the job's JobMaster of token,
// if that is still the job's JobMaster. If the job's deadline passed
// before now, its tasks are stopped first: the JobMaster may have given
// them up, whatever it says now. te.mu must be held.
func (te *TaskExecutor) touchLocked(jobID string, token election.Token, at time.Time) {
	te.admitLocked(jobID, token)
	if j := te.jobs[jobID]; j != nil && j.token == token && at.After(j.contact) {
		j.contact = at
	}
}

// expireLocked cancels the tasks of a job whose JobMaster has been silent
// too long and frees its slots. te.mu must be held.
func (te *TaskExecutor) expireLocked(jobID string, j *job) {
	cause := fmt.Sprintf("JobMaster unreachable for %v; the TaskExecutor stopped the job's tasks", j.timeout)
	freed := 0
	for _, s := range te.slots {
		if s.jobID == jobID && !s.freeing && !heldLocked(s, j) {
			te.releaseLocked(s, cause)
			freed++
		}
	}
	// Nothing of the job is held here any more; a new offer registers
	// again and sets the timeout anew.
	j.unknownTimeout()
	if freed > 0 {
		te.log.Warn("JobMaster silent past its heartbeat timeout; canceled the job's tasks and freed its slots",
			"job", jobID, "token", j.token, "silent_for", time.Since(j.contact).Round(time.Millisecond), "slots", freed)
	}
}

// watchdog stops the tasks of jobs whose JobMaster fell silent, at their
// deadlines, until ctx ends. Its one timer waits for the earliest
// deadline; contact only ever moves deadlines later, so it rechecks when
// the timer fires.
func (te *TaskExecutor) watchdog(ctx context.Context) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-te.wake:
		}
		now := time.Now()
		var next time.Time
		te.mu.Lock()
		if held := te.expireHeldLocked(now); !held.IsZero() {
			next = held
		}
		for jobID, j := range te.holding {
			d := te.deadlineLocked(j)
			switch {
			case d.IsZero():
			case !now.Before(d):
				te.expireLocked(jobID, j)
			case next.IsZero() || d.Before(next):
				next = d
			}
		}
		if forget := te.forgetLocked(now); !forget.IsZero() && (next.IsZero() || forget.Before(next)) {
			next = forget
		}
		te.mu.Unlock()
		if !next.IsZero() {
			timer.Reset(time.Until(next))
		}
	}
}

// idleJobMemory is how long a TaskExecutor remembers a job that holds
// nothing here: its JobMaster's token, against which older tokens are
// refused. Past it, a call under an older token finds no record and
// nothing of the job to act on, and a slot request brings whatever token
// the ResourceManager took from the JobMaster's registration; a deposed
// JobMaster acts only while its lease lasts (far shorter), so safety does
// not rest on this memory, and it is bounded rather than kept for ever:
// a TaskExecutor's cost does not grow with the jobs it ever ran.
const idleJobMemory = time.Minute

// unknownTimeout forgets the job's JobMaster's timeout (and so its
// deadline), to be learnt anew from the next offer, registration or
// deployment.
func (j *job) unknownTimeout() {
	j.timeout, j.offered, j.provisional = 0, time.Time{}, false
}

// idleJob is a job that stopped holding slots here at since.
type idleJob struct {
	jobID string
	since time.Time
}

// holdLocked counts a slot allocated to a job (known: adoptLocked ran);
// te.mu must be held.
func (te *TaskExecutor) holdLocked(jobID string) {
	j := te.jobs[jobID]
	if j == nil {
		return
	}
	j.held++
	if j.held == 1 {
		// In the watchdog's sight from now, with no deadline until its
		// JobMaster's timeout is learnt anew from this slot's offer or
		// deployment: one learnt while the job held nothing (an answer
		// that came late) would count from contact that predates this
		// slot.
		te.holding[jobID] = j
		j.idleSince = time.Time{}
		j.unknownTimeout()
	}
}

// unholdLocked counts a slot of a job freed. A job holding nothing here
// leaves the watchdog's sight, with its timeout: a later slot is offered
// again, which registers again and sets it anew (as after expireLocked).
// te.mu must be held.
func (te *TaskExecutor) unholdLocked(jobID string) {
	j := te.jobs[jobID]
	if j == nil || j.held == 0 {
		return
	}
	j.held--
	if j.held > 0 {
		return
	}
	delete(te.holding, jobID)
	j.unknownTimeout()
	j.idleSince = time.Now()
	te.idle = append(te.idle, idleJob{jobID, j.idleSince})
}

// forgetLocked forgets the jobs that have held nothing here for
// idleJobMemory, and returns when the next one is due (zero if none).
// te.mu must be held.
func (te *TaskExecutor) forgetLocked(now time.Time) time.Time {
	n := 0
	for ; n < len(te.idle); n++ {
		e := te.idle[n]
		if now.Sub(e.since) < idleJobMemory {
			break
		}
		if j := te.jobs[e.jobID]; j != nil && j.held == 0 && j.idleSince.Equal(e.since) {
			delete(te.jobs, e.jobID)
		}
	}
	if n > 0 {
		clear(te.idle[:n])
		te.idle = te.idle[n:]
	}
	if len(te.idle) == 0 {
		te.idle = nil // let the array go
		return time.Time{}
	}
	return te.idle[0].since.Add(idleJobMemory)
}

package taskexecutor

import (
	"context"
	"fmt"
	"time"

	"github.com/jobplane/jobplane/server/hastore"
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
// canceled: the cancel grace, at most half the timeout.
func (te *TaskExecutor) grace(timeout time.Duration) time.Duration {
	return min(te.cfg.CancelGrace, timeout/2)
}

// deadlineLocked is when the job's tasks must start stopping: the
// heartbeat timeout after the JobMaster was last heard, or the end of the
// lease its last heartbeat answer granted, whichever comes first, less
// the cancel grace. Zero when no deadline applies (no JobMaster
// registered yet). te.mu must be held.
func (te *TaskExecutor) deadlineLocked(j *job) time.Time {
	if j.timeout <= 0 || j.contact.IsZero() {
		return time.Time{}
	}
	end := j.contact.Add(j.timeout)
	if !j.leaseUntil.IsZero() && j.leaseUntil.Before(end) {
		end = j.leaseUntil
	}
	return end.Add(-te.grace(j.timeout))
}

// registered records that the job's JobMaster of token took this
// TaskExecutor's registration, sent at sent, with its heartbeat interval
// and timeout.
func (te *TaskExecutor) registered(jobID string, token hastore.Token, sent time.Time, interval, timeout time.Duration) {
	te.mu.Lock()
	defer te.mu.Unlock()
	te.registeredLocked(jobID, token, sent, interval, timeout)
}

// deployedByLocked takes the heartbeat timeout that a deployment of the job's
// JobMaster of token carries, if the TaskExecutor has none for it yet:
// the deployment may come before the answer to the offer that registered
// the TaskExecutor, and the watchdog covers the job from then on. The
// deployment counts as contact (followLocked). te.mu must be held.
func (te *TaskExecutor) deployedByLocked(jobID string, token hastore.Token, timeout time.Duration) {
	if j := te.jobs[jobID]; j != nil && j.token == token && j.timeout <= 0 {
		te.registeredLocked(jobID, token, time.Now(), 0, timeout)
	}
}

// registeredLocked is registered with te.mu held.
func (te *TaskExecutor) registeredLocked(jobID string, token hastore.Token, sent time.Time, interval, timeout time.Duration) {
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
	if j.timeout > 0 {
		j.timeout = timeout
		te.touchLocked(jobID, token, sent)
		return
	}
	// The first deadline for what the job holds here now: it counts from
	// this contact, whatever came before, and may come before the one the
	// watchdog waits for.
	j.timeout = timeout
	if sent.After(j.contact) {
		j.contact = sent
	}
	select {
	case te.wake <- struct{}{}:
	default:
	}
}

// touchLocked records contact at `at` with the job's JobMaster of token,
// if that is still the job's JobMaster. If the job's deadline passed
// before now, its tasks are stopped first: the JobMaster may have given
// them up, whatever it says now. te.mu must be held.
func (te *TaskExecutor) touchLocked(jobID string, token hastore.Token, at time.Time) {
	j := te.jobs[jobID]
	if j == nil || j.token != token {
		return
	}
	if d := te.deadlineLocked(j); !d.IsZero() && !time.Now().Before(d) {
		te.expireLocked(jobID, j)
	}
	if at.After(j.contact) {
		j.contact = at
	}
}

// expireLocked cancels the tasks of a job whose JobMaster has been silent
// too long and frees its slots. te.mu must be held.
func (te *TaskExecutor) expireLocked(jobID string, j *job) {
	cause := fmt.Sprintf("JobMaster unreachable for %v; the TaskExecutor stopped the job's tasks", j.timeout)
	freed := 0
	for _, s := range te.slots {
		if s.jobID == jobID && !s.freeing {
			te.releaseLocked(s, cause)
			freed++
		}
	}
	// Nothing of the job is held here any more; a new offer registers
	// again and sets the timeout anew.
	j.timeout = 0
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
		for jobID, j := range te.jobs {
			d := te.deadlineLocked(j)
			switch {
			case d.IsZero():
			case !now.Before(d):
				te.expireLocked(jobID, j)
			case next.IsZero() || d.Before(next):
				next = d
			}
		}
		te.mu.Unlock()
		if !next.IsZero() {
			timer.Reset(time.Until(next))
		}
	}
}

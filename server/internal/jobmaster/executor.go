package jobmaster

import (
	"context"
	"fmt"
	"slices"
	"time"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/wire/jobstatus"
)

// The JobMaster's side of TaskExecutor liveness.
//
// TaskExecutors heart-beat the process, not each JobMaster (see Router):
// the Router hands each JobMaster what a heartbeat reports of its job, and
// tells it when a TaskExecutor it registered falls silent for the
// heartbeat timeout. A JobMaster holds no timer or probe of its own.
//
// No subtask runs twice at once. An attempt the JobMaster stops counting
// as running on a TaskExecutor, without that TaskExecutor's word that it
// stopped, is an orphan: its deployment's outcome is unknown, its
// cancellation was never confirmed, or its TaskExecutor was lost. The
// subtask is deployed again only once every orphan of it is known to have
// stopped: the TaskExecutor reports it terminal, or reports the job
// complete without it after the JobMaster asked, or its TaskExecutor was
// lost and the heartbeat timeout has passed since it was last heard — a
// TaskExecutor stops the tasks of a JobMaster it has not heard from for
// that long (see the taskexecutor package). A lost TaskExecutor's attempts
// and slots get a CancelTask and a FreeSlot when it comes back.

// executorRef is a TaskExecutor registered with the JobMaster.
type executorRef struct {
	id, address string
	client      *executorClient // the process's, shared (see Router)
}

// orphanKey names an attempt that may still run on a TaskExecutor although
// the JobMaster no longer counts it as running there.
type orphanKey struct {
	ev       int32
	attempt  int
	executor string
}

// gone is what a lost TaskExecutor may still hold for the job: attempts to
// cancel and allocations to free when it comes back.
type gone struct {
	cancels []*jobplanev1.ExecutionAttemptId
	frees   []string
}

// stopMargin is the time allowed beyond a TaskExecutor's heartbeat
// timeout for its own deadline to fire and for clock rates to differ.
func (jm *JobMaster) stopMargin() time.Duration {
	return max(jm.cfg.HeartbeatTimeout/10, 50*time.Millisecond)
}

// registerExecutor registers (or refreshes) a TaskExecutor. One that comes
// back after it was lost is told to cancel and free what it may still
// hold for the job; the allocations it is told to free are returned.
func (jm *JobMaster) registerExecutor(id, address string) (freeing []string) {
	client := jm.cfg.Router.registered(id, address, jm.cfg.JobID, jm.cfg.Token)
	e := jm.executors[id]
	if e == nil || e.address != address {
		e = &executorRef{id: id, address: address}
		setKey(&jm.executors, id, e)
	}
	e.client = client
	if g := jm.gone[id]; g != nil {
		delete(jm.gone, id)
		jm.logger().Info("a lost TaskExecutor is back; canceling what it may still run for the job", "task_executor", id,
			"attempts", len(g.cancels), "slots", len(g.frees))
		jm.cleanUp(e, g.cancels, g.frees)
		return g.frees
	}
	return nil
}

// cleanUp tells a TaskExecutor, best effort, to cancel attempts and free
// allocations that the JobMaster gave up. The calls are not cut off when
// the JobMaster stops: nothing else would make them. An allocation whose FreeSlot
// fails stays among the dropped ones, and the TaskExecutor is asked to
// report the job complete, so that it is freed again while it is held.
func (jm *JobMaster) cleanUp(e *executorRef, cancels []*jobplanev1.ExecutionAttemptId, frees []string) {
	if len(cancels) == 0 && len(frees) == 0 {
		return
	}
	token, client := protoToken(jm.cfg.Token), e.client // read here: a registration replaces the client on this goroutine
	jm.goRPC(func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		for _, a := range cancels {
			_, _ = client.CancelTask(ctx, &clusterv1.CancelTaskRequest{JobId: jm.cfg.JobID, JobMasterToken: token, Attempt: a})
		}
		freed := client.freeSlots(ctx, jm.cfg.JobID, token, frees, "given up by the JobMaster")
		jm.post(func() {
			for _, aid := range freed {
				if jm.dropped[aid] == e.id {
					delete(jm.dropped, aid)
				}
			}
			if len(freed) < len(frees) {
				jm.askReport(e.id)
			}
		})
	})
}

// askReport asks a TaskExecutor to report the job complete at its next
// heartbeat, to settle its orphans and dropped slots there; one request
// at a time, so that a report settles only what was orphaned before it
// was asked for.
func (jm *JobMaster) askReport(executor string) {
	if jm.executors[executor] == nil {
		return // lost: settled by its deadline, or when it comes back
	}
	if _, outstanding := jm.asked[executor]; outstanding {
		return
	}
	setKey(&jm.asked, executor, time.Now())
	jm.cfg.Router.requestReport(executor, jm.cfg.JobID)
}

// orphan records that ev's attempt may still run on executor.
func (jm *JobMaster) orphan(ev int32, attempt int, executor string) {
	key := orphanKey{ev, attempt, executor}
	if _, ok := jm.orphans[key]; ok || executor == "" {
		return
	}
	setKey(&jm.orphans, key, time.Now())
	jm.orphaned[ev]++
	jm.askReport(executor)
}

func (jm *JobMaster) isOrphan(key orphanKey) bool {
	_, ok := jm.orphans[key]
	return ok
}

// resolve records that an orphan is known to have stopped.
func (jm *JobMaster) resolve(key orphanKey) {
	if _, ok := jm.orphans[key]; ok {
		delete(jm.orphans, key)
		jm.orphaned[key.ev]--
	}
}

// resolveOn resolves the orphans on executor that were orphaned no later
// than cutoff.
func (jm *JobMaster) resolveOn(executor string, cutoff time.Time) {
	for key, since := range jm.orphans {
		if key.executor == executor && !since.After(cutoff) {
			jm.resolve(key)
		}
	}
}

// fromReport applies what a TaskExecutor's heartbeat reports of the job:
// state changes whose own report was lost and, for a complete report (one
// the JobMaster asked for), what the TaskExecutor holds: orphans it no
// longer runs are resolved and the others canceled again, and dropped
// slots it no longer holds are forgotten and the others freed again.
func (jm *JobMaster) fromReport(executor, address string, report *clusterv1.TaskExecutorJobReport) {
	if jm.executors[executor] == nil {
		// Heard again after it was lost (or a report that overtook its
		// registration): take it back, and have it clean up.
		jm.registerExecutor(executor, address)
	}
	jm.update(executor, report.GetAttempts()...)
	if !report.GetComplete() {
		return
	}
	asked, ok := jm.asked[executor]
	if !ok {
		return // not asked for (a full heartbeat): it may predate calls in flight
	}
	delete(jm.asked, executor)
	type attemptKey struct {
		ev      int32
		attempt int
	}
	running := map[attemptKey]*jobplanev1.ExecutionAttemptId{}
	for _, t := range report.GetAttempts() {
		if ev := jm.find(t.GetAttempt()); ev >= 0 && !jobstatus.IsExecTerminal(t.GetState()) {
			running[attemptKey{ev, int(t.GetAttempt().GetAttemptNumber())}] = t.GetAttempt()
		}
	}
	var recancel []*jobplanev1.ExecutionAttemptId
	for key, since := range jm.orphans {
		if key.executor != executor || !since.Before(asked) {
			continue // orphaned after the report was asked for: it may not show yet
		}
		if a, ok := running[attemptKey{key.ev, key.attempt}]; ok {
			recancel = append(recancel, a)
			continue
		}
		jm.resolve(key)
	}
	held := map[string]bool{}
	for _, aid := range report.GetAllocationIds() {
		held[aid] = true
	}
	var refree []string
	for aid, ex := range jm.dropped {
		switch {
		case ex != executor:
		case held[aid]:
			refree = append(refree, aid)
		default:
			delete(jm.dropped, aid)
		}
	}
	if e := jm.executors[executor]; e != nil {
		jm.cleanUp(e, recancel, refree)
	}
	for key := range jm.orphans {
		if key.executor == executor {
			jm.askReport(executor) // until every orphan there stopped
			break
		}
	}
	jm.progress()
}

// released records that a TaskExecutor holds nothing of the job any more
// (it stopped following it): every orphan there has stopped, and no slot
// the JobMaster gave up is held there.
func (jm *JobMaster) released(executor string) {
	jm.resolveOn(executor, time.Now())
	for aid, ex := range jm.dropped {
		if ex == executor {
			delete(jm.dropped, aid)
		}
	}
	delete(jm.asked, executor)
	jm.progress()
}

// lostExecutor drops a TaskExecutor that fell silent (or that the
// ResourceManager lost): its slots are dropped and its attempts fail. They
// may still run there until the heartbeat timeout after it was last heard,
// so they stay orphans until then, and their subtasks are not deployed
// again before.
func (jm *JobMaster) lostExecutor(id, reason string) {
	e := jm.executors[id]
	if e == nil {
		// Unknown, or lost already: its slots and attempts were dropped
		// then, and its orphans wait for the deadline set then.
		return
	}
	delete(jm.executors, id)
	delete(jm.asked, id)
	heard := jm.cfg.Router.lastHeard(id)
	if heard.IsZero() {
		heard = time.Now() // dropped by the Router already: as late as it can have been
	}
	stopBy := heard.Add(max(jm.cfg.HeartbeatTimeout, jm.cfg.TaskLease) + jm.stopMargin())
	g := jm.gone[id]
	if g == nil {
		g = &gone{}
	}
	type placed struct {
		ev      int32
		attempt int
	}
	var lost []placed
	for aid, s := range jm.slots {
		if s.executor != id {
			continue
		}
		delete(jm.slots, aid)
		g.frees = append(g.frees, aid)
		if s.ev >= 0 {
			lost = append(lost, placed{s.ev, jm.graph.Attempt(s.ev)})
			jm.tasks[s.ev].slot, s.ev = nil, -1
		}
	}
	for aid, ex := range jm.dropped {
		if ex == id {
			delete(jm.dropped, aid)
			g.frees = append(g.frees, aid)
		}
	}
	slices.SortFunc(lost, func(a, b placed) int { return int(a.ev - b.ev) })
	for _, p := range lost {
		if jm.graph.Attempt(p.ev) == p.attempt && isLive(jm.graph.State(p.ev)) {
			jm.orphan(p.ev, p.attempt, id)
			g.cancels = append(g.cancels, jm.attemptID(p.ev))
		}
	}
	if len(g.cancels) > 0 || len(g.frees) > 0 {
		setKey(&jm.gone, id, g)
	}
	// Every orphan on it, also of earlier unclear deployments, has stopped
	// once the timeout passed since it was last heard. Liveness is on the
	// real monotonic clock, not the Config.Clock of restart delays.
	cutoff := time.Now()
	if wait := stopBy.Sub(cutoff); wait <= 0 {
		jm.resolveOn(id, cutoff)
	} else {
		jm.cfg.Router.after(wait, func() {
			jm.post(func() {
				jm.resolveOn(id, cutoff)
				jm.progress()
			})
		})
	}
	for _, p := range lost {
		// A failover started by an earlier one may have replaced the
		// attempt already: only the attempts that were there fail.
		if jm.graph.Attempt(p.ev) == p.attempt && isLive(jm.graph.State(p.ev)) {
			jm.attemptFailed(p.ev, fmt.Sprintf("TaskExecutor %s lost: %s", id, reason), id)
		}
	}
	jm.progress()
}

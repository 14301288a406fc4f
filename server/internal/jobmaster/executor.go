package jobmaster

import (
	"context"
	"fmt"
	"slices"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
	"github.com/jobplane/jobplane/server/internal/jobstatus"
	"github.com/jobplane/jobplane/server/internal/liveness"
)

// The JobMaster's side of TaskExecutor liveness.
//
// It probes every registered TaskExecutor once per heartbeat interval and
// counts one silent for the heartbeat timeout as lost, judging silence on
// the monotonic clock less its own stalls (package liveness): after a
// pause of this process, the TaskExecutors get a full timeout again.
//
// No subtask runs twice at once. An attempt the JobMaster stops counting
// as running on a TaskExecutor, without that TaskExecutor's word that it
// stopped, is an orphan: its deployment's outcome is unknown, its
// cancellation was never confirmed, or its TaskExecutor was lost. The
// subtask is deployed again only once every orphan of it is known to have
// stopped: the TaskExecutor reports it terminal, or answers a probe sent
// afterwards without it, or its TaskExecutor was lost and the heartbeat
// timeout has passed since it was last heard — a TaskExecutor stops the
// tasks of a JobMaster it has not heard from for that long (see the
// taskexecutor package). A lost TaskExecutor's attempts and slots get a
// CancelTask and a FreeSlot when it comes back.

// executorRef is a TaskExecutor registered with the JobMaster.
type executorRef struct {
	id, address string
	client      jobplanev1connect.TaskExecutorServiceClient
	heard       liveness.Mark // last heard: a probe answer, or a call from it
	probing     bool          // a probe is in flight
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
// hold for the job.
func (jm *JobMaster) registerExecutor(id, address string) {
	e := jm.executors[id]
	if e == nil || e.address != address {
		e = &executorRef{id: id, address: address, client: jobplanev1connect.NewTaskExecutorServiceClient(jm.cfg.HTTPClient, address)}
		jm.executors[id] = e
	}
	e.heard = jm.judge.Heard(time.Now())
	if g := jm.gone[id]; g != nil {
		delete(jm.gone, id)
		jm.log.Info("a lost TaskExecutor is back; canceling what it may still run for the job", "task_executor", id,
			"attempts", len(g.cancels), "slots", len(g.frees))
		jm.cleanUp(e, g.cancels, g.frees)
	}
}

// heardFrom records a call from a registered TaskExecutor.
func (jm *JobMaster) heardFrom(id string) {
	if e := jm.executors[id]; e != nil {
		e.heard = jm.judge.Heard(time.Now())
	}
}

// cleanUp tells a TaskExecutor, best effort, to cancel attempts and free
// allocations that the JobMaster gave up. The calls are not cut off when
// Run stops: nothing else would make them.
func (jm *JobMaster) cleanUp(e *executorRef, cancels []*jobplanev1.ExecutionAttemptId, frees []string) {
	if len(cancels) == 0 && len(frees) == 0 {
		return
	}
	token := protoToken(jm.cfg.Token)
	jm.goRPC(func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		for _, a := range cancels {
			_, _ = e.client.CancelTask(ctx, &jobplanev1.CancelTaskRequest{JobId: jm.cfg.JobID, JobMasterToken: token, Attempt: a})
		}
		for _, aid := range frees {
			_, _ = e.client.FreeSlot(ctx, &jobplanev1.FreeSlotRequest{JobId: jm.cfg.JobID, JobMasterToken: token, AllocationId: aid, Reason: "given up by the JobMaster"})
		}
	})
}

// orphan records that ev's attempt may still run on executor.
func (jm *JobMaster) orphan(ev int32, attempt int, executor string) {
	key := orphanKey{ev, attempt, executor}
	if _, ok := jm.orphans[key]; ok || executor == "" {
		return
	}
	jm.orphans[key] = time.Now()
	jm.orphaned[ev]++
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

// probeExecutors asks every registered TaskExecutor for the job's
// attempts on it, and counts one silent past the heartbeat timeout as
// lost. It is the judge's tick: call it once per heartbeat interval.
func (jm *JobMaster) probeExecutors() {
	now := time.Now()
	jm.judge.Tick(now)
	if !jm.valid() {
		return // no longer certainly the leader: a probe would vouch for the attempts
	}
	ids := make([]string, 0, len(jm.executors))
	for id := range jm.executors {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		e := jm.executors[id]
		if e == nil {
			continue // lost along with an earlier one
		}
		if silence := jm.judge.Silence(e.heard, now); silence > jm.cfg.HeartbeatTimeout {
			jm.log.Warn("TaskExecutor stopped answering; its attempts are lost", "task_executor", id, "silent_for", silence.Round(time.Millisecond))
			jm.lostExecutor(id, "no heartbeat answer for "+jm.cfg.HeartbeatTimeout.String())
			continue
		}
		if e.probing {
			continue
		}
		e.probing = true
		req := &jobplanev1.TaskExecutorServiceHeartbeatRequest{JobId: jm.cfg.JobID, Token: protoToken(jm.cfg.Token)}
		sent := time.Now()
		jm.goRPC(func(ctx context.Context) {
			ctx, cancel := context.WithTimeout(ctx, jm.cfg.HeartbeatTimeout/2)
			defer cancel()
			resp, err := e.client.Heartbeat(ctx, req)
			jm.post(func() {
				e.probing = false
				if err == nil && jm.executors[id] == e {
					e.heard = jm.judge.Heard(time.Now())
					jm.reconcile(e, sent, resp)
				}
			})
		})
	}
}

// reconcile compares what a TaskExecutor reported, in answer to a probe
// sent at sent, with what the JobMaster placed there: a state change whose
// report was lost is applied, and an attempt the TaskExecutor no longer
// has is lost. Attempts whose state the JobMaster learnt after sending the
// probe are newer than the answer, and left alone. Orphans on the
// TaskExecutor that the answer shows stopped are resolved, the others
// canceled again; slots the JobMaster gave up that the TaskExecutor still
// holds for the job are freed again.
func (jm *JobMaster) reconcile(e *executorRef, sent time.Time, resp *jobplanev1.TaskExecutorServiceHeartbeatResponse) {
	executor := e.id
	type attemptKey struct {
		ev      int32
		attempt int
	}
	listed := map[attemptKey]*jobplanev1.TaskExecutionStatus{}
	for _, t := range resp.GetTasks() {
		if ev := jm.find(t.GetAttempt()); ev >= 0 {
			listed[attemptKey{ev, int(t.GetAttempt().GetAttemptNumber())}] = t
		}
	}
	var recancel []*jobplanev1.ExecutionAttemptId
	for key, since := range jm.orphans {
		if key.executor != executor || !since.Before(sent) {
			continue
		}
		if t, ok := listed[attemptKey{key.ev, key.attempt}]; ok && !jobstatus.IsExecTerminal(t.GetState()) {
			recancel = append(recancel, t.GetAttempt())
			continue
		}
		jm.resolve(key)
	}
	var refree []string
	for _, s := range resp.GetSlotReport().GetSlots() {
		aid := s.GetAllocationId()
		if jm.dropped[aid] == executor && s.GetJobId() == jm.cfg.JobID {
			refree = append(refree, aid)
		}
	}
	for aid, ex := range jm.dropped {
		if ex == executor && !slices.Contains(refree, aid) {
			delete(jm.dropped, aid)
		}
	}
	jm.cleanUp(e, recancel, refree)

	var placed []int32
	for _, s := range jm.slots {
		if s.executor == executor && s.ev >= 0 {
			placed = append(placed, s.ev)
		}
	}
	slices.Sort(placed)
	for _, ev := range placed {
		state := jm.graph.State(ev)
		if jm.tasks[ev].slot == nil || jobstatus.IsExecTerminal(state) || state == jobstatus.ExecDeploying || !jm.tasks[ev].since.Before(sent) {
			continue
		}
		switch t, ok := listed[attemptKey{ev, jm.graph.Attempt(ev)}]; {
		case ok && t.GetState() != state && t.GetState() != jobstatus.ExecDeploying:
			_ = jm.update(executor, t)
		case !ok:
			jm.attemptFailed(ev, "TaskExecutor "+executor+" no longer runs the attempt", executor)
		}
	}
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
	stopBy := e.heard.At.Add(jm.cfg.HeartbeatTimeout + jm.stopMargin())
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
		jm.gone[id] = g
	}
	// Every orphan on it, also of earlier unclear deployments, has stopped
	// once the timeout passed since it was last heard. Liveness is on the
	// real monotonic clock, not the Config.Clock of restart delays.
	cutoff := time.Now()
	if wait := stopBy.Sub(cutoff); wait <= 0 {
		jm.resolveOn(id, cutoff)
	} else {
		time.AfterFunc(wait, func() {
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

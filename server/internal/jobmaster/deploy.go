package jobmaster

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/types/known/durationpb"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
	"github.com/jobplane/jobplane/sdk/wire/jobstatus"
	"github.com/jobplane/jobplane/sdk/wire/jobtrace"
)

// deploy assigns free slots to the released regions waiting for them and
// submits their attempts. Under pipelined-region scheduling a region is
// deployed once slots for all its waiting subtasks are at hand; eager
// scheduling deploys subtask by subtask.
//
// The attempts deployed together go to each TaskExecutor in one batch
// (see submit).
func (jm *JobMaster) deploy() {
	if jm.status != jobstatus.Running || len(jm.ready) == 0 || jm.ckpt != nil && jm.ckpt.loading {
		return
	}
	var free []*slotRef
	for _, s := range jm.slots {
		if s.ev < 0 {
			free = append(free, s)
		}
	}
	if len(free) == 0 {
		return
	}
	sort.Slice(free, func(i, j int) bool { return free[i].allocationID < free[j].allocationID })
	var deployed []int32
	kept := jm.ready[:0]
	for _, r := range jm.ready {
		if jm.restarting[r] != nil || !jm.graph.Released(r) {
			jm.queued[r] = false // queued again when restarted or released
			continue
		}
		var waiting []int32
		blocked := false // a subtask whose earlier attempt may still run somewhere
		for _, ev := range jm.graph.Region(r) {
			if jm.graph.State(ev) == jobstatus.ExecCreated {
				if jm.orphaned[ev] > 0 {
					blocked = true
					continue
				}
				waiting = append(waiting, ev)
			}
		}
		if len(waiting) == 0 && !blocked {
			jm.queued[r] = false
			continue
		}
		if len(waiting) == 0 || len(free) == 0 || !jm.eager && (blocked || len(waiting) > len(free)) {
			kept = append(kept, r)
			continue
		}
		n := min(len(waiting), len(free))
		for i, ev := range waiting[:n] {
			s := free[i]
			s.ev, jm.tasks[ev].slot = ev, s
			jm.place(ev, s.executor)
			jm.setState(ev, jobstatus.ExecDeploying)
			deployed = append(deployed, ev)
		}
		free = free[n:]
		if n < len(waiting) || blocked {
			kept = append(kept, r)
		} else {
			jm.queued[r] = false
		}
	}
	clear(jm.ready[len(kept):])
	jm.ready = kept
	if len(deployed) > 0 {
		jm.yieldDelay = jm.cfg.SlotYield
		jm.holdsSlots()
	}
	if len(kept) > 0 && len(free) > 0 {
		jm.armYield() // idle slots, and a region that waits for more
	}
	jm.submit(deployed)
}

// slotTimedOut fails the deployment of a region that is still waiting for
// its slots since `since`, as the slot timeout passed: the cluster may
// never have that many free, and a failure with a cause says so where
// waiting would not.
func (jm *JobMaster) slotTimedOut(r int, since time.Time) {
	if jm.status != jobstatus.Running || !jm.queued[r] || !jm.since[r].Equal(since) || jm.restarting[r] != nil || !jm.graph.Released(r) {
		return // deployed, restarted (waiting anew) or the job ended meanwhile
	}
	for _, ev := range jm.graph.Region(r) {
		if jm.graph.State(ev) == jobstatus.ExecCreated {
			msg := fmt.Sprintf("no slots: a region of %d subtasks waited %v for slots; the job holds %d", len(jm.graph.Region(r)), jm.cfg.SlotTimeout, len(jm.slots))
			jm.attemptFailed(ev, msg, "")
			jm.progress()
			return
		}
	}
}

// vertex returns the JobVertex and subtask index of execution vertex ev.
func (jm *JobMaster) vertex(ev int32) (*jobplanev1.JobVertex, int) {
	vi, subtask := jm.graph.VertexOf(ev)
	return jm.cfg.Graph.GetVertices()[vi], subtask
}

func (jm *JobMaster) attemptID(ev int32) *jobplanev1.ExecutionAttemptId {
	v, subtask := jm.vertex(ev)
	return &jobplanev1.ExecutionAttemptId{VertexId: v.GetId(), SubtaskIndex: int32(subtask), AttemptNumber: int32(jm.graph.Attempt(ev))}
}

// submit sends DEPLOYING attempts to the TaskExecutors of their slots:
// one batch per TaskExecutor (SubmitTasks), in one goroutine each. While
// an offer that takes deployments in its answer is handled (jm.answer),
// the attempts deployed into its slots go in that answer instead.
func (jm *JobMaster) submit(evs []int32) {
	byExecutor := map[string][]int32{}
	var order []string
	var inAnswer []int32
	for _, ev := range evs {
		t := &jm.tasks[ev]
		if jm.graph.State(ev) != jobstatus.ExecDeploying || t.slot == nil {
			continue // a failover in the same pass stopped it already
		}
		id := t.slot.executor
		if jm.executors[id] == nil {
			jm.attemptFailed(ev, "TaskExecutor "+id+" is not registered", "")
			continue
		}
		if a := jm.answer; a != nil && a.executor == id && a.slots[t.slot.allocationID] {
			inAnswer = append(inAnswer, ev)
			continue
		}
		if byExecutor[id] == nil {
			order = append(order, id)
		}
		byExecutor[id] = append(byExecutor[id], ev)
	}
	jm.answerWith(inAnswer)
	token := protoToken(jm.cfg.Token)
	for _, id := range order {
		e, evs := jm.executors[id], byExecutor[id]
		tasks := make([]*clusterv1.TaskDeployment, len(evs))
		attempts := make([]int, len(evs))
		for i, ev := range evs {
			tasks[i] = jm.deployment(ev)
			attempts[i] = jm.graph.Attempt(ev)
		}
		client := e.client // read here: a registration replaces it on this goroutine
		jm.goRPC(func(ctx context.Context) {
			if !jm.valid() {
				return // not certainly the leader any more; the JobMaster suspends the job
			}
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			ctx, span := jobtrace.Start(ctx, trace.SpanContext{}, "jobplane.deploy", trace.WithAttributes(
				attribute.String("jobplane.job_id", jm.cfg.JobID), attribute.String("jobplane.task_executor_id", id), attribute.Int("jobplane.tasks", len(tasks))))
			defer span.End()
			errs := client.submitTasks(ctx, jm.cfg.JobID, token, durationpb.New(jm.cfg.HeartbeatTimeout), jm.taskLease(), tasks)
			jm.post(func() {
				for i, ev := range evs {
					jm.submitted(ev, attempts[i], errs[i])
				}
			})
		})
	}
}

// deployment is the TaskDeployment of ev's current attempt.
func (jm *JobMaster) deployment(ev int32) *clusterv1.TaskDeployment {
	v, _ := jm.vertex(ev)
	restored, from := jm.restoredState(ev)
	return &clusterv1.TaskDeployment{
		AllocationId: jm.tasks[ev].slot.allocationID, Attempt: jm.attemptID(ev), TaskName: v.GetName(),
		Invokable: v.GetInvokable(), Config: v.GetConfig(), NumberOfSubtasks: v.GetParallelism(),
		RestoredState: restored, RestoredFrom: from,
	}
}

// offerAnswer collects the deployments that the answer to one offer
// carries (JobMasterService.OfferSlots, deployments_in_answer): those of
// attempts deployed into the offer's accepted slots while the offer is
// handled.
type offerAnswer struct {
	executor string
	slots    map[string]bool // the accepted allocation ids
	tasks    []*clusterv1.TaskDeployment
}

// answerBatch is the attempts of one offer's answer whose deployment no
// state of theirs has confirmed yet: those whose task.answered is the
// batch (a restart clears it). Those still unconfirmed after the
// heartbeat interval are sent again with SubmitTasks: the answer may not
// have arrived.
type answerBatch struct {
	evs  []int32
	left int         // attempts still unconfirmed
	stop func() bool // stops the resend
}

// answerWith puts the deployments of evs, DEPLOYING into slots of the
// offer being answered, into its answer, and sends them again with
// SubmitTasks unless a state of each confirms it in time.
func (jm *JobMaster) answerWith(evs []int32) {
	if len(evs) == 0 {
		return
	}
	b := &answerBatch{evs: evs, left: len(evs)}
	for _, ev := range evs {
		jm.answer.tasks = append(jm.answer.tasks, jm.deployment(ev))
		jm.tasks[ev].answered = b
	}
	b.stop = time.AfterFunc(jm.cfg.HeartbeatInterval, func() { jm.post(func() { jm.resend(b) }) }).Stop
}

// answerAgain puts into the offer's answer the deployments, still
// unconfirmed, of attempts in its slots: the offer is sent again, so the
// answer that carried them may have been lost.
func (jm *JobMaster) answerAgain() {
	for aid := range jm.answer.slots {
		if s := jm.slots[aid]; s != nil && s.ev >= 0 && jm.tasks[s.ev].answered != nil && jm.graph.State(s.ev) == jobstatus.ExecDeploying {
			jm.answer.tasks = append(jm.answer.tasks, jm.deployment(s.ev))
		}
	}
}

// confirmed records that ev's attempt, deployed in an offer's answer,
// reached its TaskExecutor, as a state of it came from there: its
// deployment returned, as a SubmitTasks call would have.
func (jm *JobMaster) confirmed(ev int32) {
	t := &jm.tasks[ev]
	b := t.answered
	if b == nil {
		return
	}
	t.answered = nil
	if b.left--; b.left == 0 {
		b.stop()
	}
	jm.submitted(ev, jm.graph.Attempt(ev), nil)
}

// resend sends again, with SubmitTasks, the deployments of b that no
// state confirmed within the heartbeat interval.
func (jm *JobMaster) resend(b *answerBatch) {
	var again []int32
	for _, ev := range b.evs {
		t := &jm.tasks[ev]
		if t.answered != b {
			continue
		}
		t.answered = nil
		again = append(again, ev)
	}
	jm.submit(again)
}

// maxFailureBytes bounds a failure message taken from a TaskExecutor, so
// that answers carrying failures stay small.
const maxFailureBytes = 4 << 10

// truncate shortens a failure message to maxFailureBytes, saying so.
func truncate(msg string) string {
	if len(msg) <= maxFailureBytes {
		return msg
	}
	return strings.ToValidUTF8(msg[:maxFailureBytes], "") + "… (truncated)"
}

// refused reports whether a TaskExecutor refused a call for certain, so
// that the call's effect did not happen there; any other failure leaves
// the outcome unknown.
func refused(err error) bool {
	for _, reason := range []jobplanev1.ErrorReason{
		jobplanev1.ErrorReason_ERROR_REASON_SLOT_NOT_ALLOCATED, jobplanev1.ErrorReason_ERROR_REASON_SLOT_OCCUPIED,
		jobplanev1.ErrorReason_ERROR_REASON_UNKNOWN_INVOKABLE, jobplanev1.ErrorReason_ERROR_REASON_STALE_FENCING_TOKEN,
	} {
		if apierror.Is(err, reason) {
			return true
		}
	}
	return connect.CodeOf(err) == connect.CodeInvalidArgument
}

func (jm *JobMaster) submitted(ev int32, attempt int, err error) {
	if jm.graph.Attempt(ev) != attempt {
		return
	}
	t := &jm.tasks[ev]
	if err != nil && jm.graph.State(ev) != jobstatus.ExecDeploying {
		// The attempt reported a state already: it was deployed, whatever
		// became of the answer.
		err = nil
	}
	if err != nil && !refused(err) && t.slot != nil {
		// The attempt may have started although the call failed: it is
		// not deployed again before it is known to have stopped.
		jm.orphan(ev, attempt, t.slot.executor)
	}
	unreachable := connect.CodeOf(err) == connect.CodeUnavailable
	if unreachable || apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_SLOT_NOT_ALLOCATED) || apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_SLOT_OCCUPIED) {
		// The slot is not (or not yet) ours to use, or its TaskExecutor
		// cannot be reached: drop it and deploy the subtask elsewhere,
		// without counting a failure. An unreachable TaskExecutor is lost
		// for good once its probes time out.
		if s := t.slot; s != nil {
			delete(jm.slots, s.allocationID)
			s.ev, t.slot = -1, nil
			// Best effort: the TaskExecutor may have started the attempt
			// after all, or still hold the slot for the job.
			jm.abandon(s, jm.attemptID(ev))
		}
		switch {
		case t.cancelOn:
			t.cancelOn = false
			jm.setState(ev, jobstatus.ExecCanceled)
		case jm.graph.State(ev) == jobstatus.ExecDeploying:
			jm.setState(ev, jobstatus.ExecCreated)
			jm.enqueue(jm.graph.RegionOf(ev))
		}
		jm.progress()
		return
	}
	if err != nil {
		jm.attemptFailed(ev, "deployment failed: "+err.Error(), t.slot.executorID())
		return
	}
	if t.cancelOn {
		t.cancelOn = false
		if !jobstatus.IsExecTerminal(jm.graph.State(ev)) {
			jm.cancelAttempt(ev)
		}
	}
}

// abandon tells a slot's TaskExecutor, best effort, to cancel an attempt
// it may run there and to free the slot, which the JobMaster no longer
// counts as its own.
//
// Until the TaskExecutor's answers no longer show the slot for the job,
// it is freed again at each (see reconcile), so that a slot whose
// FreeSlot was lost does not stay with the job.
func (jm *JobMaster) abandon(s *slotRef, attempt *jobplanev1.ExecutionAttemptId) {
	e := jm.executors[s.executor]
	if e == nil {
		return
	}
	setKey(&jm.dropped, s.allocationID, s.executor)
	var cancels []*jobplanev1.ExecutionAttemptId
	if attempt != nil {
		cancels = append(cancels, attempt)
	}
	jm.cleanUp(e, cancels, []string{s.allocationID})
}

func (s *slotRef) executorID() string {
	if s == nil {
		return ""
	}
	return s.executor
}

// find returns the execution vertex an attempt id names, or -1.
func (jm *JobMaster) find(a *jobplanev1.ExecutionAttemptId) int32 {
	vi, ok := jm.vertexByID[a.GetVertexId()]
	if !ok || a.GetSubtaskIndex() < 0 || a.GetSubtaskIndex() >= jm.cfg.Graph.GetVertices()[vi].GetParallelism() {
		return -1
	}
	return jm.graph.ExecutionVertex(vi, int(a.GetSubtaskIndex()))
}

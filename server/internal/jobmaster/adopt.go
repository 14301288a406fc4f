package jobmaster

import (
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/wire/jobstatus"
)

// Adoption: a JobMaster that takes a job over under a task lease
// (Config.TaskLease, Config.Adopt) keeps its predecessor's running
// attempts instead of deploying them again.
//
// Every subtask starts as an orphan "not yet found" (adoptingKey): it may
// run on some TaskExecutor under an older token, so it is not deployed.
// Each TaskExecutor that follows the job here (it heart-beats this
// process under this JobMaster's token: it learnt the token from the
// ResourceManager, a slot request or an earlier call) is asked once,
// with AdoptAttempts, for what it holds of the job; the attempts it lists
// become this JobMaster's, in their slots and states, and stop being
// orphans. A subtask still not found once the task lease has passed since
// the start (plus the stop margin) is deployed anew: any attempt of it
// under an older token was granted its lease before the older leadership
// ended, which was before this one began, and has stopped by then.

// adoptingKey is the executor of the "not yet found" orphans.
const adoptingKey = "(adopting)"

// beginAdoption makes every subtask an orphan until it is found, or
// until every member TaskExecutor answered (RouterConfig.Members), or
// the task lease has passed.
func (jm *JobMaster) beginAdoption() {
	jm.adoptMu.Lock()
	jm.adoptAsked = map[string]bool{}
	jm.adoptMu.Unlock()
	jm.adoptAnswered = map[string]bool{}
	for ev := range jm.graph.Subtasks() {
		jm.orphan(int32(ev), 0, adoptingKey)
	}
	jm.adopting.Store(true)
	wait := jm.cfg.TaskLease + jm.stopMargin()
	jm.logger().Info("looking for the previous JobMaster's attempts to adopt", "lease", jm.cfg.TaskLease)
	jm.cfg.Router.adoptionBegan(jm)
	jm.cfg.Router.after(wait, func() {
		jm.post(func() { jm.endAdoption("the task lease has passed") })
	})
}

// endAdoption deploys what no TaskExecutor holds: once every member
// answered, or the task lease has passed since the adoption began.
func (jm *JobMaster) endAdoption(why string) {
	if !jm.adopting.Load() {
		return
	}
	jm.adopting.Store(false)
	jm.cfg.Router.adoptionEnded(jm)
	found := jm.graph.Subtasks() - int(jm.orphanedOn(adoptingKey))
	jm.resolveOn(adoptingKey, time.Now())
	jm.logger().Info("adoption over; deploying what no TaskExecutor holds", "why", why, "adopted_or_ended", found, "subtasks", jm.graph.Subtasks())
	jm.progress()
}

// adoptionAnswered ends the adoption if every member TaskExecutor has
// answered AdoptAttempts for the job. Each answer moved the job to this
// JobMaster's token there, so that no older JobMaster can deploy on it
// any more, and listed all it holds of the job; every TaskExecutor on
// which any JobMaster deployed is a member (it was recorded before its
// registration was answered, and stays one until its lease has ended).
// A subtask none of them listed runs nowhere.
func (jm *JobMaster) adoptionAnswered(members map[string]string) {
	if !jm.adopting.Load() {
		return
	}
	for id := range members {
		if !jm.adoptAnswered[id] {
			return
		}
	}
	jm.endAdoption("every member TaskExecutor answered")
}

// taskLease is the task lease to grant with a registration or a
// deployment: Config.TaskLease, while the leadership certainly holds.
func (jm *JobMaster) taskLease() *durationpb.Duration {
	if jm.cfg.TaskLease <= 0 || !jm.valid() {
		return nil
	}
	return durationpb.New(jm.cfg.TaskLease)
}

// orphanedOn counts the orphans on executor.
func (jm *JobMaster) orphanedOn(executor string) int32 {
	var n int32
	for key := range jm.orphans {
		if key.executor == executor {
			n++
		}
	}
	return n
}

// claimAdoption returns the job's entry of an AdoptAttempts request to
// TaskExecutor id if the JobMaster is to ask it now what it holds of the
// job: once while it adopts (again after a failed call). Safe from any
// goroutine: the Router asks every adopting JobMaster of a TaskExecutor
// in one call (Router.adopt).
func (jm *JobMaster) claimAdoption(id string) *clusterv1.JobAdoption {
	jm.adoptMu.Lock()
	defer jm.adoptMu.Unlock()
	if !jm.adopting.Load() || jm.adoptAsked[id] {
		return nil
	}
	jm.adoptAsked[id] = true
	return &clusterv1.JobAdoption{JobId: jm.cfg.JobID, JobMasterToken: protoToken(jm.cfg.Token), JobMasterAddress: jm.cfg.Address}
}

// adoptAnswer takes TaskExecutor id's answer to the job's entry of an
// AdoptAttempts call: what it holds of the job, its refusal, or the
// call's error (asked again at its next heartbeat). members is the
// TaskExecutor membership read with the answer (nil if unknown).
func (jm *JobMaster) adoptAnswer(id, address string, held *clusterv1.AdoptedJob, refused *jobplanev1.ItemError, err error, members map[string]string) {
	switch {
	case err != nil:
		jm.logger().Warn("AdoptAttempts failed; asking again at its next heartbeat", "task_executor", id, "err", err)
		jm.adoptMu.Lock()
		delete(jm.adoptAsked, id)
		jm.adoptMu.Unlock()
	case refused != nil:
		jm.logger().Warn("AdoptAttempts refused", "task_executor", id, "refused", refused)
	default:
		jm.adoptAnswered[id] = true
		jm.adopted(id, address, held)
		if members != nil {
			jm.adoptionAnswered(members)
		}
	}
}

// adopted takes what a TaskExecutor holds of the job as this JobMaster's:
// its allocations as slots, its attempts as deployed there, each in the
// state it listed.
func (jm *JobMaster) adopted(id, address string, held *clusterv1.AdoptedJob) {
	if jm.status != jobstatus.Running || len(held.GetAllocationIds()) == 0 && len(held.GetAttempts()) == 0 {
		return // nothing of the job there (a member asked by the Router's sweep)
	}
	jm.registerExecutor(id, address)
	for _, aid := range held.GetAllocationIds() {
		if jm.slots[aid] == nil {
			setKey(&jm.slots, aid, &slotRef{allocationID: aid, executor: id, index: -1, ev: -1})
		}
	}
	for _, h := range held.GetAttempts() {
		st := h.GetStatus()
		ev := jm.find(st.GetAttempt())
		s := jm.slots[h.GetAllocationId()]
		key := orphanKey{ev, 0, adoptingKey}
		if ev < 0 || s == nil || s.ev >= 0 || !jm.isOrphan(key) {
			// Not of this graph, or found already: two live attempts of
			// one subtask cannot be (each runs under one token, and each
			// older JobMaster's stopped before the next deployed); keep
			// the first, and leave this one to the TaskExecutor's
			// deadline.
			jm.logger().Warn("AdoptAttempts listed an attempt that cannot be adopted", "task_executor", id, "attempt", st.GetAttempt())
			continue
		}
		jm.resolve(key)
		jm.graph.SetAttempt(ev, int(st.GetAttempt().GetAttemptNumber()))
		s.ev, jm.tasks[ev].slot = ev, s
		jm.place(ev, id)
		jm.setState(ev, jobstatus.ExecRunning)
		if jobstatus.IsExecTerminal(st.GetState()) {
			_ = jm.apply(id, st) // it ended while no JobMaster listened: as if reported now
		}
	}
	jm.logger().Info("adopted attempts", "task_executor", id, "attempts", len(held.GetAttempts()), "slots", len(held.GetAllocationIds()))
	jm.holdsSlots()
	jm.progress()
}

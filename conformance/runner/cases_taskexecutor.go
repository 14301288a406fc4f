package runner

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/jobplane/jobplane/conformance/invokable"
	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	"github.com/jobplane/jobplane/gen/jobplane/cluster/v1/clusterv1connect"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
)

// TaskExecutorCases returns the cases of the TaskExecutor mode
// (--taskexecutor-command): the runner plays the JobManager side (its HA
// store, the `jobmanager` leadership, a ResourceManager and JobMasters)
// and checks what the contract says a TaskExecutor must do.
func TaskExecutorCases() []Case {
	return []Case{
		{Name: "taskexecutor/registers", Run: teRegisters,
			Doc: "the TaskExecutor finds the ResourceManager's leader through the HA store, registers with its token, its address, a slot report of free slots and the suite's invokables, and heartbeats under that registration; its address serves TaskExecutorService"},
		{Name: "taskexecutor/follows-resource-manager", Run: teFollowsResourceManager,
			Doc: "after a new leader of `jobmanager` (new token) the TaskExecutor registers again under the new token and heartbeats there; RequestSlot under the old one is then ABORTED (STALE_FENCING_TOKEN) and allocates nothing, before any call under the new token too (the grant it observed counts as seen, since 1.2); and a yet newer grant is taken by RequestSlot before the TaskExecutor could register under it"},
		{Name: "taskexecutor/forged-resource-manager-token-refused", Run: teForgedResourceManagerTokenRefused,
			Doc: "since 1.2: RequestSlot under a ResourceManager token newer than the grant of `jobmanager` in the HA store (an epoch never granted) is ABORTED (STALE_FENCING_TOKEN), answered within 10s and naming the current grant in StaleTokenDetails, and changes nothing: the real ResourceManager's RequestSlot is allocated afterwards"},
		{Name: "taskexecutor/runs-and-reports", Run: teRunsAndReports,
			Doc: "RequestSlot makes the TaskExecutor offer the slot to the job's JobMaster under its token; SubmitTask runs the task, whose states go to that JobMaster in order: RUNNING then FINISHED with the task's value (the next change sent only once the JobMaster, slow here, answered), or FAILED with its message"},
		{Name: "taskexecutor/heartbeats-job-masters", Run: teHeartbeatsJobMasters,
			Doc: "while it runs a job's attempt the TaskExecutor heartbeats the process of the job's JobMaster every heartbeat interval (HeartbeatFromTaskExecutor naming the job in its first, full heartbeat, or the per-job Heartbeat the contract keeps)"},
		{Name: "taskexecutor/deployment-refusals", Run: teDeploymentRefusals,
			Doc: "a repeated SubmitTask of a deployed attempt succeeds and changes nothing; SubmitTask of an invokable not registered is FAILED_PRECONDITION (UNKNOWN_INVOKABLE), into an allocation not held FAILED_PRECONDITION (SLOT_NOT_ALLOCATED); RequestSlot of a held slot under another allocation is FAILED_PRECONDITION (SLOT_OCCUPIED)"},
		{Name: "taskexecutor/stale-job-master-refused", Run: teStaleJobMasterRefused,
			Doc: "once a newer JobMaster token of a job is seen, SubmitTask and CancelTask under the older one are ABORTED (STALE_FENCING_TOKEN): nothing is deployed, and the newer JobMaster's attempt keeps running"},
		{Name: "taskexecutor/forged-job-master-token-refused", Run: teForgedJobMasterTokenRefused,
			Doc: "since 1.2: CancelTask of a running attempt, and AdoptAttempts of its job, under JobMaster tokens newer than the grant of `job/<job_id>` in the HA store (epochs never granted, one in the real JobMaster's own session) are ABORTED (STALE_FENCING_TOKEN, for AdoptAttempts the job's entry refused), answered within 10s and naming the job's grant, and change nothing: the attempt keeps running and is not reported CANCELED, and the real JobMaster's next call is served"},
		{Name: "taskexecutor/newer-job-master-takes-the-slots", Run: teNewerJobMasterTakesTheSlots,
			Doc: "without a task lease, a newer JobMaster token of a job stops the older JobMaster's attempt, which is reported to no one after, and the job's slot is offered to the newer JobMaster, which deploys into it"},
		{Name: "taskexecutor/cancel-and-free", Run: teCancelAndFree,
			Doc: "CancelTask stops a running attempt, reported CANCELED to its JobMaster; FreeSlot frees its slot, which the slot report then shows free and a new allocation can take"},
		{Name: "taskexecutor/stops-when-job-master-silent", Run: teStopsWhenJobMasterSilent,
			Doc: "once a job's JobMaster answers nothing for its heartbeat timeout (2s here, given with the offer and the deployment), the TaskExecutor has stopped the job's attempt and freed its slot (checked 5s past the timeout)"},
		{Name: "taskexecutor/adoption-keeps-running", Run: teAdoptionKeepsRunning,
			Doc: "under a task lease, AdoptAttempts from a newer JobMaster lists the running attempt (RUNNING, deployed under the older token) and its allocation, and the attempt keeps running under the newer token, to which it then reports"},
		{Name: "taskexecutor/stale-refusal-keeps-adopted", Run: teStaleRefusalKeepsAdopted,
			Doc: "a state report held by the older JobMaster while a newer one adopts the attempt, and then refused NOT_LEADER, does not cancel the adopted attempt"},
	}
}

// teSlots is the least number of slots a TaskExecutor under test offers.
const teSlots = 2

// registered waits for the TaskExecutor's registration under the
// current ResourceManager token, and returns it.
func (t *T) registered() *teRegistration {
	var reg *teRegistration
	t.setup(func() {
		registered := func() bool {
			reg = t.te.cluster.registration()
			return reg != nil && reg.token == t.te.rm.Token()
		}
		if !t.wait(30*time.Second, func() bool { return registered() || t.te.proc.exited() }) || !registered() {
			exited := ""
			if t.te.proc.exited() {
				exited = fmt.Sprintf("; the TaskExecutor exited (%v), its last output:\n%s", t.te.proc.exitState(), lastLines(t.te.proc.output(), 20))
			}
			t.Fatalf("the TaskExecutor did not register with the ResourceManager (leader of %q at %s, token %s); expected it to find the leader through the HA store at {hastore} and call RegisterTaskExecutor within 30s%s", election.JobManager, t.te.clusterHS.URL(), t.te.rm.Token(), exited)
		}
		if len(reg.slots) < teSlots {
			t.Fatalf("the TaskExecutor registered %d slots; the suite needs at least %d", len(reg.slots), teSlots)
		}
	})
	return reg
}

// rmCalls sums up the TaskExecutor's calls to the ResourceManager so
// far, in the order they first came: each kind (registration or
// heartbeat, its registration, its outcome) with how often it came.
func (t *T) rmCalls() string {
	var kinds []string
	count := map[string]int{}
	for _, e := range t.te.log.Events(func(e Event) bool { return e.Op == "rm-register" || e.Op == "rm-heartbeat" }) {
		k := fmt.Sprintf("%s %s under %s", e.Op, e.Detail, e.Token)
		if e.Err != nil {
			k += fmt.Sprintf(" refused (%v)", e.Err)
		}
		if count[k] == 0 {
			kinds = append(kinds, k)
		}
		count[k]++
	}
	if len(kinds) == 0 {
		return "nothing"
	}
	out := make([]string, len(kinds))
	for i, k := range kinds {
		out[i] = fmt.Sprintf("%s ×%d", k, count[k])
	}
	return strings.Join(out, "; ")
}

// teClient returns a client of the registered TaskExecutor.
func (t *T) teClient(reg *teRegistration) clusterv1connect.TaskExecutorServiceClient {
	return t.te.taskExecutor(reg.address)
}

// teJobMaster starts a JobMaster of the runner's for a job, its nth
// (n counts them in the case; a later one's token is newer), and returns
// its token: the grant of the job's election that the runner takes in the
// HA store, since a TaskExecutor takes a JobMaster token on the
// JobMaster's own calls only once the store shows it (since 1.2).
func (t *T) teJobMaster(jobID string, n uint64) election.Token {
	var tk election.Token
	t.setup(func() {
		var err error
		if tk, err = t.te.leadJob(t.ctx, jobID); err != nil {
			t.Fatalf("JobMaster %d of job %s: %v", n, jobID, err)
		}
	})
	t.te.cluster.setJobMaster(jobID, tk)
	return tk
}

func (t *T) requestSlot(te clusterv1connect.TaskExecutorServiceClient, rm election.Token, slot int32, alloc, jobID string, jm election.Token) error {
	_, err := te.RequestSlot(t.ctx, &clusterv1.RequestSlotRequest{
		ResourceManagerToken: protoToken(rm), SlotIndex: slot, AllocationId: alloc, JobId: jobID,
		JobMasterAddress: t.te.clusterHS.URL(), JobMasterToken: protoToken(jm),
	})
	return err
}

// allocate allocates a slot to a job under the current ResourceManager
// token, as a step of the case.
func (t *T) allocate(te clusterv1connect.TaskExecutorServiceClient, slot int32, alloc, jobID string, jm election.Token) {
	t.setup(func() {
		if err := t.requestSlot(te, t.te.rm.Token(), slot, alloc, jobID, jm); err != nil {
			t.Fatalf("RequestSlot(slot %d, %s, job %s) under the current ResourceManager token: %v; expected it allocated", slot, alloc, jobID, err)
		}
	})
}

// deployment is a SubmitTask of the case's, with the runner's heartbeat
// timeout.
func deployment(jobID string, jm election.Token, alloc string, vertex, inv string, config map[string]string, lease time.Duration) *clusterv1.SubmitTaskRequest {
	req := &clusterv1.SubmitTaskRequest{
		JobId: jobID, JobMasterToken: protoToken(jm), AllocationId: alloc,
		Attempt: &jobplanev1.ExecutionAttemptId{VertexId: vertex}, TaskName: vertex, Invokable: inv, Config: config,
		NumberOfSubtasks: 1, HeartbeatTimeout: durationpb.New(teHeartbeatTimeout),
	}
	if lease > 0 {
		req.TaskLease = durationpb.New(lease)
	}
	return req
}

// runningGate registers the TaskExecutor, allocates its slot 0 to a job
// of the case under the job's first JobMaster grant, and runs a gate
// there as vertex (with the task lease lease): the TaskExecutor's client,
// the job, its JobMaster's token and the attempt, reported RUNNING.
func (t *T) runningGate(vertex string, lease time.Duration) (clusterv1connect.TaskExecutorServiceClient, string, election.Token, string) {
	te := t.teClient(t.registered())
	jobID := t.job("j")
	jm := t.teJobMaster(jobID, 1)
	t.allocate(te, 0, "a", jobID, jm)
	attempt := t.deploy(te, deployment(jobID, jm, "a", vertex, invokable.Gate, nil, lease))
	t.mustState(jobID, attempt, jm, jobplanev1.ExecutionState_EXECUTION_STATE_RUNNING)
	return te, jobID, jm, attempt
}

// deploy submits a task that must be taken.
func (t *T) deploy(te clusterv1connect.TaskExecutorServiceClient, req *clusterv1.SubmitTaskRequest) string {
	if _, err := te.SubmitTask(t.ctx, req); err != nil {
		t.Fatalf("SubmitTask(%s, %s) under the job's JobMaster token %s: %v; expected it deployed", req.GetInvokable(), req.GetAllocationId(), token(req.GetJobMasterToken()), err)
	}
	return attemptKey(req.GetAttempt())
}

// waitState waits up to d for the attempt's state st reported to the
// job's JobMaster under jm, and returns that report.
func (t *T) waitState(jobID, attempt string, jm election.Token, st jobplanev1.ExecutionState, d time.Duration) (Event, bool) {
	var got Event
	found := t.wait(d, func() bool {
		for _, e := range t.te.cluster.states(jobID, attempt) {
			if e.State == st && e.Token == jm {
				got = e
				return true
			}
		}
		return false
	})
	return got, found
}

// mustState is waitState for a state the case needs before its checks.
func (t *T) mustState(jobID, attempt string, jm election.Token, st jobplanev1.ExecutionState) {
	t.setup(func() {
		if _, found := t.waitState(jobID, attempt, jm, st, teActs); !found {
			t.Fatalf("attempt %s of job %s: no %v reported to its JobMaster under %s within %v (reports: %v)", attempt, jobID, st, jm, teActs, t.te.cluster.states(jobID, attempt))
		}
	})
}

// heartbeatsAfter waits for n heartbeats of the TaskExecutor to its
// JobMasters' process after the event seq: by then it has acted on
// whatever it had been told before.
func (t *T) heartbeatsAfter(seq, n int) {
	t.setup(func() {
		if !t.wait(teActs, func() bool {
			return len(t.te.log.Events(func(e Event) bool { return e.Seq > seq && e.Op == "jm-heartbeat" })) >= n
		}) {
			t.Fatalf("the TaskExecutor sent fewer than %d HeartbeatFromTaskExecutor in %v; expected one every %v", n, teActs, teHeartbeatInterval)
		}
	})
}

// attemptState asks the TaskExecutor, as the job's JobMaster, for the
// attempt's state there (UNSPECIFIED if it lists none).
func (t *T) attemptState(te clusterv1connect.TaskExecutorServiceClient, jobID string, jm election.Token, attempt string) jobplanev1.ExecutionState {
	resp, err := te.Heartbeat(t.ctx, &clusterv1.TaskExecutorServiceHeartbeatRequest{Sender: &clusterv1.TaskExecutorServiceHeartbeatRequest_JobMaster{
		JobMaster: &clusterv1.TaskExecutorServiceHeartbeatRequest_JobMasterSender{JobId: jobID, Token: protoToken(jm)},
	}})
	if err != nil {
		t.Fatalf("TaskExecutorService.Heartbeat as job %s's JobMaster %s: %v; expected the states of the job's attempts", jobID, jm, err)
	}
	for _, s := range resp.GetTasks() {
		if attemptKey(s.GetAttempt()) == attempt {
			return s.GetState()
		}
	}
	return jobplanev1.ExecutionState_EXECUTION_STATE_UNSPECIFIED
}

// isStale reports whether err is ABORTED with STALE_FENCING_TOKEN.
func isStale(err error) bool {
	return connect.CodeOf(err) == connect.CodeAborted && reason(err) == "STALE_FENCING_TOKEN"
}

func teRegisters(t *T) {
	reg := t.registered()
	for _, name := range []string{invokable.Gate, invokable.Fail, invokable.Value} {
		if !slices.Contains(reg.invokables, name) {
			t.Errorf("the TaskExecutor registered the invokables %q; expected the suite's %s among them (see conformance/README.md)", reg.invokables, name)
		}
	}
	for i, s := range reg.slots {
		if int(s.GetSlotIndex()) != i || s.GetAllocationId() != "" || s.GetJobId() != "" {
			t.Errorf("slot %d of the registration's report is %v; expected slot index %d, free", i, s, i)
		}
	}
	// 3 heartbeats take 0.3s; a loaded machine may hold the TaskExecutor.
	if !t.wait(teActs, func() bool {
		return len(ok(t.te.log.Events(func(e Event) bool {
			return e.Op == "rm-heartbeat" && e.Detail == "registration="+reg.registrationID && e.Token == reg.token
		}))) >= 3
	}) {
		t.Errorf("fewer than 3 ResourceManagerService.Heartbeat under registration %s in %v; expected one every %v, as RegisterTaskExecutor answered; the TaskExecutor sent: %s",
			reg.registrationID, teActs, teHeartbeatInterval, t.rmCalls())
	}
	resp, err := t.teClient(reg).Heartbeat(t.ctx, &clusterv1.TaskExecutorServiceHeartbeatRequest{
		Sender: &clusterv1.TaskExecutorServiceHeartbeatRequest_ResourceManagerToken{ResourceManagerToken: protoToken(reg.token)},
	})
	switch {
	case err != nil:
		t.Errorf("TaskExecutorService.Heartbeat at the registered address %s: %v; expected the TaskExecutor's slot report", reg.address, err)
	case resp.GetTaskExecutorId() != reg.id || len(resp.GetSlotReport().GetSlots()) != len(reg.slots):
		t.Errorf("TaskExecutorService.Heartbeat answered id %q and %d slots; expected %q and %d, as registered", resp.GetTaskExecutorId(), len(resp.GetSlotReport().GetSlots()), reg.id, len(reg.slots))
	}
}

func teFollowsResourceManager(t *T) {
	reg := t.registered()
	old := reg.token
	t.setup(func() {
		if err := t.te.lead(t.ctx); err != nil {
			t.Fatalf("a new leadership of %s: %v", election.JobManager, err)
		}
	})
	cur := t.te.rm.Token()
	var regSeq int
	if !t.wait(10*time.Second, func() bool {
		for _, e := range ok(t.te.log.Events(func(e Event) bool { return e.Op == "rm-register" && e.Token == cur })) {
			regSeq = e.Seq
			return true
		}
		return false
	}) {
		t.Fatalf("no RegisterTaskExecutor under the new ResourceManager token %s within 10s of the leader change (old %s); expected the TaskExecutor to follow the leader of %q in the HA store and register again", cur, old, election.JobManager)
	}
	if !t.wait(10*time.Second, func() bool {
		return len(ok(t.te.log.Events(func(e Event) bool { return e.Seq > regSeq && e.Op == "rm-heartbeat" && e.Token == cur }))) > 0
	}) {
		t.Errorf("no ResourceManagerService.Heartbeat under the new token %s within 10s of registering again", cur)
	}
	te := t.teClient(reg)
	jobID := t.job("j")
	jm := t.teJobMaster(jobID, 1)
	// It registered under the new token, so it observed that grant: the
	// old token is stale before any call under the new one.
	if err := t.requestSlot(te, old, 1, "stale-observed", jobID, jm); !isStale(err) {
		t.Errorf("RequestSlot under the old ResourceManager token %s, after the TaskExecutor registered under the newer %s but before any call under it, answered %v; expected ABORTED (STALE_FENCING_TOKEN): the grant it observes counts as seen (TaskExecutorService, since 1.2)", old, cur, codeAndReason(err))
	}
	t.allocate(te, 0, "a", jobID, jm)
	if err := t.requestSlot(te, old, 1, "stale", jobID, jm); !isStale(err) {
		t.Errorf("RequestSlot under the old ResourceManager token %s, after a call under the newer %s, answered %v; expected ABORTED (STALE_FENCING_TOKEN)", old, cur, codeAndReason(err))
	}
	if err := t.requestSlot(te, cur, 1, "b", jobID, jm); err != nil {
		t.Errorf("RequestSlot of slot 1 under the current token, after refused ones under the old token, answered %v; expected it allocated (the refused calls allocate nothing)", codeAndReason(err))
	}
	// A yet newer grant, which the TaskExecutor cannot register under (the
	// runner's ResourceManager refuses registrations for now): a
	// ResourceManager may call before the TaskExecutor registered there,
	// and a granted token is taken, however the TaskExecutor learns it.
	t.te.cluster.holdRegistrations(true)
	t.setup(func() {
		if err := t.te.lead(t.ctx); err != nil {
			t.Fatalf("a new leadership of %s: %v", election.JobManager, err)
		}
	})
	newer := t.te.rm.Token()
	if err := t.requestSlot(te, newer, 0, "a", jobID, jm); err != nil {
		t.Errorf("a repeated RequestSlot under the newer grant %s of %s, which the TaskExecutor has not registered under, answered %v; expected it taken: a newer token the HA store grants becomes the current one (TaskExecutorService)", newer, election.JobManager, codeAndReason(err))
	}
	t.te.cluster.holdRegistrations(false)
}

// teGrantWaitBound bounds how long the runner lets a TaskExecutor take to
// refuse a ResourceManager token that the HA store never granted: the
// contract lets it wait a few seconds for its observation of the store to
// show the grant (the reference TaskExecutors wait 2s); 10s leaves a slow
// machine room.
const teGrantWaitBound = 10 * time.Second

func teForgedResourceManagerTokenRefused(t *T) {
	reg := t.registered()
	cur := reg.token
	te := t.teClient(reg)
	jobID := t.job("j")
	jm := t.teJobMaster(jobID, 1)
	t.allocate(te, 0, "a", jobID, jm)
	forged := election.Token{SessionID: "conformance-forged", Epoch: cur.Epoch + 1000}
	t.te.log.Add(Event{Source: "runner", Op: "forge", Key: election.JobManager, Token: forged})
	began := time.Now()
	var err error
	func() {
		ctx, cancel := context.WithTimeout(t.ctx, teGrantWaitBound+5*time.Second)
		defer cancel()
		_, err = te.RequestSlot(ctx, &clusterv1.RequestSlotRequest{
			ResourceManagerToken: protoToken(forged), SlotIndex: 1, AllocationId: "forged", JobId: jobID,
			JobMasterAddress: t.te.clusterHS.URL(), JobMasterToken: protoToken(jm),
		})
	}()
	took := time.Since(began)
	switch {
	case err == nil:
		t.Errorf("RequestSlot under the forged ResourceManager token %s (the grant of %s is %s; epoch %d was never granted) was taken; expected ABORTED (STALE_FENCING_TOKEN): a newer token becomes the current one only if the HA store shows it as the current grant (TaskExecutorService, since 1.2), else any caller locks the ResourceManager out", forged, election.JobManager, cur, forged.Epoch)
	case !isStale(err):
		t.Errorf("RequestSlot under the forged ResourceManager token %s answered %v; expected ABORTED (STALE_FENCING_TOKEN)", forged, codeAndReason(err))
	default:
		if d, found := errorDetail[*jobplanev1.StaleTokenDetails](err); !found || d.GetElection() != election.JobManager || token(d.GetCurrent()) != cur {
			t.Errorf("the refusal of the forged token names %v in StaleTokenDetails; expected election %q and the current grant %s", d, election.JobManager, cur)
		}
	}
	if took > teGrantWaitBound {
		t.Errorf("RequestSlot under the forged ResourceManager token was answered after %v; expected within %v (a TaskExecutor may wait a few seconds for its observation of the store)", took.Round(time.Millisecond), teGrantWaitBound)
	}
	if err := t.requestSlot(te, cur, 1, "b", jobID, jm); err != nil {
		t.Errorf("RequestSlot of slot 1 under the real ResourceManager's token %s, after the forged call, answered %v; expected it allocated: a refused token changes nothing", cur, codeAndReason(err))
	}
}

func teRunsAndReports(t *T) {
	t.te.cluster.mu.Lock()
	t.te.cluster.slowRunning = 300 * time.Millisecond
	t.te.cluster.mu.Unlock()
	reg := t.registered()
	te := t.teClient(reg)
	jobID := t.job("j")
	jm := t.teJobMaster(jobID, 1)
	t.allocate(te, 0, "a0", jobID, jm)
	t.allocate(te, 1, "a1", jobID, jm)
	if !t.wait(teActs, func() bool {
		offered := map[string]bool{}
		for _, e := range ok(t.te.log.Events(func(e Event) bool { return e.Op == "offer" && e.Key == jobID && e.Token == jm })) {
			for _, a := range strings.Split(e.Detail, ",") {
				offered[a] = true
			}
		}
		return offered["a0"] && offered["a1"]
	}) {
		t.Errorf("the allocations a0 and a1 were not both offered to job %s's JobMaster under %s within %v (offers: %v); expected OfferSlots to the job_master_address RequestSlot named", jobID, jm, teActs, t.te.log.Events(func(e Event) bool { return e.Op == "offer" }))
	}
	want := "value of " + jobID
	value := t.deploy(te, deployment(jobID, jm, "a0", "value", invokable.Value, map[string]string{invokable.ValueKey: want}, 0))
	msg := "failure of " + jobID
	failing := t.deploy(te, deployment(jobID, jm, "a1", "fail", invokable.Fail, map[string]string{invokable.FailMessage: msg}, 0))

	if e, found := t.waitState(jobID, value, jm, jobplanev1.ExecutionState_EXECUTION_STATE_FINISHED, teActs); !found {
		t.Errorf("attempt %s (%s): no FINISHED reported to its JobMaster under %s within %v (reports: %v)", value, invokable.Value, jm, teActs, t.te.cluster.states(jobID, value))
	} else if !strings.Contains(e.Detail, fmt.Sprintf("value=%q", want)) {
		t.Errorf("attempt %s reported %v; expected FINISHED with the value %q it returned", value, e, want)
	}
	evs := t.te.cluster.states(jobID, value)
	running := slices.IndexFunc(evs, func(e Event) bool { return e.State == jobplanev1.ExecutionState_EXECUTION_STATE_RUNNING })
	finished := slices.IndexFunc(evs, func(e Event) bool { return e.State == jobplanev1.ExecutionState_EXECUTION_STATE_FINISHED })
	if running < 0 || finished >= 0 && running > finished {
		t.Errorf("attempt %s reported %v; expected RUNNING, then FINISHED", value, evs)
	}
	if e, found := t.waitState(jobID, failing, jm, jobplanev1.ExecutionState_EXECUTION_STATE_FAILED, teActs); !found {
		t.Errorf("attempt %s (%s): no FAILED reported to its JobMaster under %s within %v (reports: %v)", failing, invokable.Fail, jm, teActs, t.te.cluster.states(jobID, failing))
	} else if !strings.Contains(e.Detail, msg) {
		t.Errorf("attempt %s reported %v; expected FAILED with a failure message holding %q", failing, e, msg)
	}
}

func teHeartbeatsJobMasters(t *T) {
	reg := t.registered()
	te := t.teClient(reg)
	jobID := t.job("j")
	jm := t.teJobMaster(jobID, 1)
	t.allocate(te, 0, "a", jobID, jm)
	attempt := t.deploy(te, deployment(jobID, jm, "a", "gate", invokable.Gate, nil, 0))
	t.mustState(jobID, attempt, jm, jobplanev1.ExecutionState_EXECUTION_STATE_RUNNING)
	since := t.te.log.Len()
	heartbeats := func() []Event {
		return ok(t.te.log.Events(func(e Event) bool {
			return e.Seq >= since && (e.Op == "jm-heartbeat" && e.Key == reg.id || e.Op == "jm-heartbeat-plain" && e.Key == jobID && e.Token == jm)
		}))
	}
	if !t.wait(teActs, func() bool { return len(heartbeats()) >= 5 }) {
		t.Errorf("%d heartbeats to job %s's JobMaster process in the %v after its attempt ran (%v); expected one every %v, the interval its offer's answer gave", len(heartbeats()), jobID, teActs, heartbeats(), teHeartbeatInterval)
	}
	named := ok(t.te.log.Events(func(e Event) bool {
		return e.Op == "jm-heartbeat" && strings.Contains(e.Detail, fmt.Sprintf("%s@%d", jobID, jm.Epoch)) || e.Op == "jm-heartbeat-plain" && e.Key == jobID
	}))
	if len(named) == 0 {
		t.Errorf("no heartbeat named job %s; expected the first HeartbeatFromTaskExecutor to its JobMaster's process (full) to list it, or a per-job Heartbeat", jobID)
	}
}

// refusedWith checks that err is FAILED_PRECONDITION with reason want.
func (t *T) refusedWith(call string, err error, want string) {
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || reason(err) != want {
		t.Errorf("%s answered %v; expected FAILED_PRECONDITION (%s)", call, codeAndReason(err), want)
	}
}

func teDeploymentRefusals(t *T) {
	reg := t.registered()
	te := t.teClient(reg)
	jobID := t.job("j")
	jm := t.teJobMaster(jobID, 1)
	t.allocate(te, 0, "a", jobID, jm)
	req := deployment(jobID, jm, "a", "gate", invokable.Gate, nil, 0)
	attempt := t.deploy(te, req)
	if _, err := te.SubmitTask(t.ctx, req); err != nil {
		t.Errorf("SubmitTask of attempt %s again, as after a lost answer: %v; expected it to succeed and change nothing", attempt, codeAndReason(err))
	}
	t.mustState(jobID, attempt, jm, jobplanev1.ExecutionState_EXECUTION_STATE_RUNNING)
	err := t.requestSlot(te, t.te.rm.Token(), 0, "other", jobID, jm)
	t.refusedWith("RequestSlot of slot 0, held by allocation a, under the allocation other", err, "SLOT_OCCUPIED")
	t.allocate(te, 1, "b", jobID, jm)
	_, err = te.SubmitTask(t.ctx, deployment(jobID, jm, "b", "unknown", "conformance.not-registered", nil, 0))
	t.refusedWith("SubmitTask of the invokable conformance.not-registered", err, "UNKNOWN_INVOKABLE")
	_, err = te.SubmitTask(t.ctx, deployment(jobID, jm, "not-held", "lost", invokable.Gate, nil, 0))
	t.refusedWith("SubmitTask into the allocation not-held, which the TaskExecutor does not hold", err, "SLOT_NOT_ALLOCATED")
	if evs := t.te.cluster.states(jobID, attempt); len(slices.DeleteFunc(slices.Clone(evs), func(e Event) bool { return e.State != jobplanev1.ExecutionState_EXECUTION_STATE_RUNNING })) != 1 {
		t.Errorf("attempt %s reported %v; expected RUNNING once: the repeated SubmitTask changes nothing", attempt, evs)
	}
}

func teStaleJobMasterRefused(t *T) {
	te, jobID, older, _ := t.runningGate("first", 0)
	newer := t.teJobMaster(jobID, 2)
	t.allocate(te, 1, "b", jobID, newer)
	if _, err := te.SubmitTask(t.ctx, deployment(jobID, older, "b", "stale", invokable.Gate, nil, 0)); !isStale(err) {
		t.Errorf("SubmitTask under the older JobMaster token %s, after a call under the newer %s, answered %v; expected ABORTED (STALE_FENCING_TOKEN)", older, newer, codeAndReason(err))
	}
	second := t.deploy(te, deployment(jobID, newer, "b", "second", invokable.Gate, nil, 0))
	t.mustState(jobID, second, newer, jobplanev1.ExecutionState_EXECUTION_STATE_RUNNING)
	_, err := te.CancelTask(t.ctx, &clusterv1.CancelTaskRequest{JobId: jobID, JobMasterToken: protoToken(older), Attempt: &jobplanev1.ExecutionAttemptId{VertexId: "second"}})
	if !isStale(err) {
		t.Errorf("CancelTask under the older JobMaster token %s answered %v; expected ABORTED (STALE_FENCING_TOKEN)", older, codeAndReason(err))
	}
	t.heartbeatsAfter(t.te.log.Len(), 3)
	if st := t.attemptState(te, jobID, newer, second); st != jobplanev1.ExecutionState_EXECUTION_STATE_RUNNING || hasState(t.te.cluster.states(jobID, second), jobplanev1.ExecutionState_EXECUTION_STATE_CANCELED) {
		t.Errorf("the newer JobMaster's attempt %s is %v after a CancelTask under the older token (reports: %v); expected it still RUNNING", second, st, t.te.cluster.states(jobID, second))
	}
	if evs := t.te.cluster.states(jobID, "stale/0#0"); len(evs) > 0 {
		t.Errorf("the refused deployment reported %v; expected nothing deployed", evs)
	}
}

func teForgedJobMasterTokenRefused(t *T) {
	te, jobID, jm, attempt := t.runningGate("gate", 0)
	// The real JobMaster's session: a session id is public (GetLeader,
	// StaleTokenDetails), so it proves nothing.
	forged := election.Token{SessionID: jm.SessionID, Epoch: jm.Epoch + 1000}
	other := election.Token{SessionID: "conformance-forged", Epoch: jm.Epoch + 2000}
	t.te.log.Add(Event{Source: "runner", Op: "forge", Key: election.Job(jobID), Token: forged})
	ctx, cancel := context.WithTimeout(t.ctx, teGrantWaitBound+5*time.Second)
	defer cancel()
	began := time.Now()
	_, err := te.CancelTask(ctx, &clusterv1.CancelTaskRequest{JobId: jobID, JobMasterToken: protoToken(forged), Attempt: &jobplanev1.ExecutionAttemptId{VertexId: "gate"}})
	took := time.Since(began)
	t.checkForgedRefused("CancelTask", forged, jobID, jm, err, took)
	began = time.Now()
	resp, err := te.AdoptAttempts(ctx, &clusterv1.AdoptAttemptsRequest{Jobs: []*clusterv1.JobAdoption{{JobId: jobID, JobMasterToken: protoToken(other), JobMasterAddress: t.te.clusterHS.URL()}}})
	took = time.Since(began)
	switch {
	case err != nil:
		t.Errorf("AdoptAttempts of job %s under the forged JobMaster token %s answered %v; expected its entry refused STALE_FENCING_TOKEN in the answer", jobID, other, codeAndReason(err))
	case len(resp.GetRefused()) != 1 || resp.GetRefused()[0].GetReason() != jobplanev1.ErrorReason_ERROR_REASON_STALE_FENCING_TOKEN:
		t.Errorf("AdoptAttempts of job %s under the forged JobMaster token %s (the job's grant is %s; epoch %d was never granted) answered %v; expected its entry refused STALE_FENCING_TOKEN: a newer JobMaster token on a JobMaster's own call becomes the job's only if the HA store shows it as the job's grant (TaskExecutorService, since 1.2)", jobID, other, jm, other.Epoch, resp)
	default:
		if md := resp.GetRefused()[0].GetMetadata(); md["current_epoch"] != fmt.Sprint(jm.Epoch) || md["current_session_id"] != jm.SessionID {
			t.Errorf("the refusal of AdoptAttempts under the forged token names %v; expected the job's grant %s", md, jm)
		}
	}
	if took > teGrantWaitBound {
		t.Errorf("AdoptAttempts under the forged JobMaster token was answered after %v; expected within %v", took.Round(time.Millisecond), teGrantWaitBound)
	}
	t.heartbeatsAfter(t.te.log.Len(), 2)
	if st := t.attemptState(te, jobID, jm, attempt); st != jobplanev1.ExecutionState_EXECUTION_STATE_RUNNING || hasState(t.te.cluster.states(jobID, attempt), jobplanev1.ExecutionState_EXECUTION_STATE_CANCELED) {
		t.Errorf("attempt %s is %v after calls under forged JobMaster tokens (reports: %v); expected it still RUNNING under the real JobMaster %s, and its next call served: a refused token changes nothing", attempt, st, t.te.cluster.states(jobID, attempt), jm)
	}
}

// checkForgedRefused checks the answer to a JobMaster call under a forged
// token: ABORTED (STALE_FENCING_TOKEN) naming the job's grant jm, within
// teGrantWaitBound.
func (t *T) checkForgedRefused(call string, forged election.Token, jobID string, jm election.Token, err error, took time.Duration) {
	switch {
	case err == nil:
		t.Errorf("%s under the forged JobMaster token %s (the grant of %s is %s; epoch %d was never granted) was taken; expected ABORTED (STALE_FENCING_TOKEN): a newer JobMaster token on a JobMaster's own call becomes the job's only if the HA store shows it as the job's grant (TaskExecutorService, since 1.2), else any caller cancels the job's attempts and locks its JobMaster out", call, forged, election.Job(jobID), jm, forged.Epoch)
	case !isStale(err):
		t.Errorf("%s under the forged JobMaster token %s answered %v; expected ABORTED (STALE_FENCING_TOKEN)", call, forged, codeAndReason(err))
	default:
		if d, found := errorDetail[*jobplanev1.StaleTokenDetails](err); !found || d.GetElection() != election.Job(jobID) || token(d.GetCurrent()) != jm {
			t.Errorf("the refusal of %s under the forged token names %v in StaleTokenDetails; expected election %q and the job's grant %s", call, d, election.Job(jobID), jm)
		}
	}
	if took > teGrantWaitBound {
		t.Errorf("%s under the forged JobMaster token was answered after %v; expected within %v", call, took.Round(time.Millisecond), teGrantWaitBound)
	}
}

func teNewerJobMasterTakesTheSlots(t *T) {
	te, jobID, older, first := t.runningGate("first", 0)
	newer := t.teJobMaster(jobID, 2)
	t.allocate(te, 1, "b", jobID, newer)
	if !t.wait(teActs, func() bool {
		for _, e := range ok(t.te.log.Events(func(e Event) bool { return e.Op == "offer" && e.Key == jobID && e.Token == newer })) {
			if slices.Contains(strings.Split(e.Detail, ","), "a") {
				return true
			}
		}
		return false
	}) {
		t.Errorf("the job's allocation a was not offered to its newer JobMaster %s within %v (offers: %v); expected the TaskExecutor to offer it the slots its job holds (JobMasterService.OfferSlots)", newer, teActs, t.te.log.Events(func(e Event) bool { return e.Op == "offer" }))
	}
	// The older attempt stops: the slot takes the newer JobMaster's
	// deployment once it did (SLOT_OCCUPIED until then).
	req := deployment(jobID, newer, "a", "third", invokable.Gate, nil, 0)
	var err error
	t.wait(teActs, func() bool {
		_, err = te.SubmitTask(t.ctx, req)
		return reason(err) != "SLOT_OCCUPIED"
	})
	if err != nil {
		t.Errorf("SubmitTask into allocation a under the newer JobMaster token answered %v %v on; expected the older JobMaster's attempt stopped and the slot taken", codeAndReason(err), teActs)
	} else {
		t.mustState(jobID, attemptKey(req.GetAttempt()), newer, jobplanev1.ExecutionState_EXECUTION_STATE_RUNNING)
	}
	if evs := t.te.cluster.states(jobID, first); len(evs) != 1 {
		t.Errorf("the older JobMaster's attempt %s reported %v; expected RUNNING under %s alone: a newer JobMaster cancels it and it is never reported", first, evs, older)
	}
}

func teCancelAndFree(t *T) {
	te, jobID, jm, attempt := t.runningGate("gate", 0)
	if _, err := te.CancelTask(t.ctx, &clusterv1.CancelTaskRequest{JobId: jobID, JobMasterToken: protoToken(jm), Attempt: &jobplanev1.ExecutionAttemptId{VertexId: "gate"}}); err != nil {
		t.Fatalf("CancelTask under the job's JobMaster token: %v; expected it taken", err)
	}
	if _, found := t.waitState(jobID, attempt, jm, jobplanev1.ExecutionState_EXECUTION_STATE_CANCELED, teActs); !found {
		t.Errorf("attempt %s: no CANCELED reported within %v of CancelTask (reports: %v); expected it stopped and reported", attempt, teActs, t.te.cluster.states(jobID, attempt))
	}
	if _, err := te.FreeSlot(t.ctx, &clusterv1.FreeSlotRequest{JobId: jobID, JobMasterToken: protoToken(jm), AllocationId: "a"}); err != nil {
		t.Fatalf("FreeSlot under the job's JobMaster token: %v; expected it taken", err)
	}
	var slots []*clusterv1.SlotStatus
	if !t.wait(teActs, func() bool {
		resp, err := te.Heartbeat(t.ctx, &clusterv1.TaskExecutorServiceHeartbeatRequest{
			Sender: &clusterv1.TaskExecutorServiceHeartbeatRequest_ResourceManagerToken{ResourceManagerToken: protoToken(t.te.rm.Token())},
		})
		slots = resp.GetSlotReport().GetSlots()
		return err == nil && len(slots) > 0 && slots[0].GetAllocationId() == ""
	}) {
		t.Errorf("the slot report still shows the slots %v %v after FreeSlot of slot 0; expected it free", slots, teActs)
	}
	other := t.job("k")
	if err := t.requestSlot(te, t.te.rm.Token(), 0, "a2", other, t.teJobMaster(other, 1)); err != nil {
		t.Errorf("RequestSlot of the freed slot for another job answered %v; expected it allocated", codeAndReason(err))
	}
}

// adoptionLease is the task lease the runner's JobMasters grant in the
// adoption cases: longer than any case.
const adoptionLease = 2 * time.Minute

func (t *T) adopt(te clusterv1connect.TaskExecutorServiceClient, jobID string, jm election.Token) *clusterv1.AdoptAttemptsResponse {
	resp, err := te.AdoptAttempts(t.ctx, &clusterv1.AdoptAttemptsRequest{Jobs: []*clusterv1.JobAdoption{{JobId: jobID, JobMasterToken: protoToken(jm), JobMasterAddress: t.te.clusterHS.URL()}}})
	if err != nil || len(resp.GetRefused()) > 0 || len(resp.GetJobs()) != 1 {
		t.Fatalf("AdoptAttempts of job %s under the newer JobMaster token %s answered %v, %v; expected one entry, not refused", jobID, jm, resp, err)
	}
	return resp
}

// checkAdopted checks that an AdoptAttempts answer lists the attempt
// RUNNING, deployed under older, and the allocation.
func (t *T) checkAdopted(resp *clusterv1.AdoptAttemptsResponse, attempt string, older election.Token, alloc string) {
	got := resp.GetJobs()[0]
	i := slices.IndexFunc(got.GetAttempts(), func(h *clusterv1.HeldAttempt) bool { return attemptKey(h.GetStatus().GetAttempt()) == attempt })
	switch {
	case i < 0:
		t.Fatalf("AdoptAttempts listed the attempts %v; expected the running attempt %s, held under the task lease", got.GetAttempts(), attempt)
	case got.GetAttempts()[i].GetStatus().GetState() != jobplanev1.ExecutionState_EXECUTION_STATE_RUNNING || token(got.GetAttempts()[i].GetDeployedUnder()) != older || got.GetAttempts()[i].GetAllocationId() != alloc:
		t.Errorf("AdoptAttempts listed %v; expected attempt %s RUNNING in %s, deployed under %s", got.GetAttempts()[i], attempt, alloc, older)
	}
	if !slices.Contains(got.GetAllocationIds(), alloc) {
		t.Errorf("AdoptAttempts listed the allocations %q; expected %s among them", got.GetAllocationIds(), alloc)
	}
}

func teAdoptionKeepsRunning(t *T) {
	t.te.cluster.mu.Lock()
	t.te.cluster.taskLease = adoptionLease
	t.te.cluster.mu.Unlock()
	te, jobID, older, attempt := t.runningGate("gate", adoptionLease)
	t.heartbeatsAfter(t.te.log.Len(), 2)

	newer := t.teJobMaster(jobID, 2)
	t.checkAdopted(t.adopt(te, jobID, newer), attempt, older, "a")
	adopted := t.te.log.Len()
	if st := t.attemptState(te, jobID, newer, attempt); st != jobplanev1.ExecutionState_EXECUTION_STATE_RUNNING {
		t.Errorf("attempt %s is %v at the TaskExecutor after its adoption; expected RUNNING", attempt, st)
	}
	if _, err := te.CancelTask(t.ctx, &clusterv1.CancelTaskRequest{JobId: jobID, JobMasterToken: protoToken(newer), Attempt: &jobplanev1.ExecutionAttemptId{VertexId: "gate"}}); err != nil {
		t.Fatalf("CancelTask under the adopting JobMaster's token: %v; expected it taken", err)
	}
	if _, found := t.waitState(jobID, attempt, newer, jobplanev1.ExecutionState_EXECUTION_STATE_CANCELED, teActs); !found {
		t.Errorf("attempt %s: no CANCELED reported to the adopting JobMaster (%s) within %v of its CancelTask (reports: %v)", attempt, newer, teActs, t.te.cluster.states(jobID, attempt))
	}
	for _, e := range t.te.cluster.states(jobID, attempt) {
		if e.Seq > adopted && e.Token != newer {
			t.Errorf("attempt %s reported %v after its adoption; expected its reports to go under the adopting token %s only", attempt, e, newer)
		}
	}
}

func teStaleRefusalKeepsAdopted(t *T) {
	jobID := t.job("j")
	older := t.teJobMaster(jobID, 1)
	hold := make(chan struct{})
	t.te.cluster.mu.Lock()
	t.te.cluster.taskLease = adoptionLease
	t.te.cluster.hold, t.te.cluster.holdToken = hold, older
	t.te.cluster.mu.Unlock()
	released := false
	t.Cleanup(func() {
		if !released {
			close(hold)
		}
	})
	reg := t.registered()
	te := t.teClient(reg)
	t.allocate(te, 0, "a", jobID, older)
	attempt := t.deploy(te, deployment(jobID, older, "a", "gate", invokable.Gate, nil, adoptionLease))
	t.setup(func() {
		if !t.wait(teActs, func() bool { return len(t.te.log.Events(func(e Event) bool { return e.Op == "report-held" })) > 0 }) {
			t.Fatalf("no state report of attempt %s reached its JobMaster within %v", attempt, teActs)
		}
	})
	t.heartbeatsAfter(t.te.log.Len(), 2)
	newer := t.teJobMaster(jobID, 2)
	t.checkAdopted(t.adopt(te, jobID, newer), attempt, older, "a")
	close(hold)
	released = true
	var refused int
	t.setup(func() {
		if !t.wait(teActs, func() bool {
			evs := t.te.log.Events(func(e Event) bool { return e.Op == "report-refused" })
			if len(evs) > 0 {
				refused = evs[0].Seq
			}
			return len(evs) > 0
		}) {
			t.Fatalf("the held state report was not answered within %v", teActs)
		}
	})
	t.heartbeatsAfter(refused, 3)
	if st := t.attemptState(te, jobID, newer, attempt); st != jobplanev1.ExecutionState_EXECUTION_STATE_RUNNING || hasState(t.te.cluster.states(jobID, attempt), jobplanev1.ExecutionState_EXECUTION_STATE_CANCELED) {
		t.Errorf("attempt %s is %v after the older JobMaster refused its held report NOT_LEADER (reports: %v); expected it still RUNNING: the refusal comes from a JobMaster that no longer has the attempt", attempt, st, t.te.cluster.states(jobID, attempt))
	}
}

// silentTimeout is the JobMasters' heartbeat timeout in
// stops-when-job-master-silent, and silentMargin how much longer the
// TaskExecutor gets to have stopped the job's attempts.
const (
	silentTimeout = 2 * time.Second
	silentMargin  = 5 * time.Second
)

func teStopsWhenJobMasterSilent(t *T) {
	t.te.cluster.mu.Lock()
	t.te.cluster.timeout = silentTimeout
	t.te.cluster.mu.Unlock()
	reg := t.registered()
	te := t.teClient(reg)
	jobID := t.job("j")
	jm := t.teJobMaster(jobID, 1)
	t.allocate(te, 0, "a", jobID, jm)
	req := deployment(jobID, jm, "a", "gate", invokable.Gate, nil, 0)
	req.HeartbeatTimeout = durationpb.New(silentTimeout)
	attempt := t.deploy(te, req)
	t.mustState(jobID, attempt, jm, jobplanev1.ExecutionState_EXECUTION_STATE_RUNNING)
	t.te.cluster.silence()
	silent := time.Now()
	var slots []*clusterv1.SlotStatus
	var st jobplanev1.ExecutionState
	if !t.wait(silentTimeout+silentMargin, func() bool {
		resp, err := te.Heartbeat(t.ctx, &clusterv1.TaskExecutorServiceHeartbeatRequest{
			Sender: &clusterv1.TaskExecutorServiceHeartbeatRequest_ResourceManagerToken{ResourceManagerToken: protoToken(t.te.rm.Token())},
		})
		slots = resp.GetSlotReport().GetSlots()
		st = t.attemptState(te, jobID, jm, attempt)
		return err == nil && len(slots) > 0 && slots[0].GetAllocationId() == "" && st != jobplanev1.ExecutionState_EXECUTION_STATE_RUNNING
	}) {
		t.Errorf("%.1fs after job %s's JobMaster fell silent (heartbeat timeout %v), the attempt %s is %v and slot 0 is %v; expected the attempt stopped and the slot free by the timeout (TaskExecutorService: it runs a job's attempts only while it hears from the job's JobMaster)", time.Since(silent).Seconds(), jobID, silentTimeout, attempt, st, slots[0])
	}
}

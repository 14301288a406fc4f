package runner

import (
	"fmt"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	"github.com/jobplane/jobplane/gen/jobplane/cluster/v1/clusterv1connect"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
)

// tokenKind is a token a fenced call may carry that is not the receiver's
// current one, and the answer the contract gives it (FencingToken).
type tokenKind struct {
	name   string
	token  func(current, revoked election.Token) *jobplanev1.FencingToken
	code   connect.Code
	reason string
}

// The tokens other than the current one: older ones (the revoked grant,
// and forged ones of the same session, or of another session with an
// equal or lower epoch) are stale; a newer one is NOT_LEADER; a malformed
// one is invalid.
var tokenKinds = []tokenKind{
	{"the revoked token", func(_, r election.Token) *jobplanev1.FencingToken { return protoToken(r) }, connect.CodeAborted, "STALE_FENCING_TOKEN"},
	{"an older epoch of the same session", func(c, _ election.Token) *jobplanev1.FencingToken {
		return &jobplanev1.FencingToken{SessionId: c.SessionID, Epoch: c.Epoch - 1}
	}, connect.CodeAborted, "STALE_FENCING_TOKEN"},
	{"another session with an equal epoch", func(c, _ election.Token) *jobplanev1.FencingToken {
		return &jobplanev1.FencingToken{SessionId: c.SessionID + "0", Epoch: c.Epoch}
	}, connect.CodeAborted, "STALE_FENCING_TOKEN"},
	{"another session with a lower epoch", func(c, _ election.Token) *jobplanev1.FencingToken {
		return &jobplanev1.FencingToken{SessionId: "conformance", Epoch: c.Epoch - 1}
	}, connect.CodeAborted, "STALE_FENCING_TOKEN"},
	{"a newer epoch", func(c, _ election.Token) *jobplanev1.FencingToken {
		return &jobplanev1.FencingToken{SessionId: c.SessionID, Epoch: c.Epoch + 1}
	}, connect.CodeUnavailable, "NOT_LEADER"},
	{"a token without a session", func(c, _ election.Token) *jobplanev1.FencingToken {
		return &jobplanev1.FencingToken{Epoch: c.Epoch}
	}, connect.CodeInvalidArgument, "INVALID_ARGUMENT"},
	{"a token with epoch zero", func(c, _ election.Token) *jobplanev1.FencingToken {
		return &jobplanev1.FencingToken{SessionId: c.SessionID}
	}, connect.CodeInvalidArgument, "INVALID_ARGUMENT"},
	{"no token", func(election.Token, election.Token) *jobplanev1.FencingToken { return nil }, connect.CodeInvalidArgument, "INVALID_ARGUMENT"},
}

// fencedCall is one fenced call of the cluster protocol, sent to the
// server with the given job token; it returns the call's error (for a call
// that refuses per entry, the entry's).
type fencedCall struct {
	name string
	// rm: the call goes to the ResourceManager, which knows only older
	// job tokens as stale; a newer one is judged by RegisterJobMaster
	// (register), and answered newerCode and newerReason by the other
	// calls (code 0: taken, with nothing done).
	rm bool
	// newerCode and newerReason: the answer of an rm call but
	// RegisterJobMaster to a job token newer than the registered one
	// (since 1.2, stated).
	newerCode   connect.Code
	newerReason string
	// register: the call is RegisterJobMaster, which takes a newer job
	// token only if it is the current grant of the job's election: a
	// newer one never granted is stale too.
	register bool
	// anyRefusal: a malformed token may be refused in any way (the call
	// answers per job, not with an error).
	anyRefusal bool
	send       func(t *T, f *fencing, tk *jobplanev1.FencingToken) error
}

// fencing is what a fenced-call case works with: a job running under a
// second grant, the revoked first one, and clients of the server.
type fencing struct {
	id               string
	current, revoked election.Token
	jm               clusterv1connect.JobMasterServiceClient
	rm               clusterv1connect.ResourceManagerServiceClient
	rmToken          *jobplanev1.FencingToken
	te               *taskExec
}

func (f *fencing) status(attempt *jobplanev1.ExecutionAttemptId, st jobplanev1.ExecutionState) *jobplanev1.TaskExecutionStatus {
	s := &jobplanev1.TaskExecutionStatus{Attempt: attempt, State: st}
	if st == jobplanev1.ExecutionState_EXECUTION_STATE_FAILED {
		s.FailureMessage = "sent with a token not the JobMaster's"
	}
	return s
}

// sinks are the gated subtasks of the job, which run until the gate opens.
func sinks() []*jobplanev1.ExecutionAttemptId {
	return []*jobplanev1.ExecutionAttemptId{{VertexId: "sink", SubtaskIndex: 0}, {VertexId: "sink", SubtaskIndex: 1}}
}

// stateUpdate sends a one-change report of every running subtask in st.
func stateUpdate(st jobplanev1.ExecutionState) func(t *T, f *fencing, tk *jobplanev1.FencingToken) error {
	return func(t *T, f *fencing, tk *jobplanev1.FencingToken) error {
		var first error
		for _, a := range sinks() {
			_, err := f.jm.UpdateTaskExecutionState(t.ctx, &clusterv1.UpdateTaskExecutionStateRequest{
				JobId: f.id, JobMasterToken: tk, TaskExecutorId: f.te.id, Status: f.status(a, st)})
			if first == nil {
				first = err
			}
		}
		return first
	}
}

func batchUpdate(st jobplanev1.ExecutionState) func(t *T, f *fencing, tk *jobplanev1.FencingToken) error {
	return func(t *T, f *fencing, tk *jobplanev1.FencingToken) error {
		var statuses []*jobplanev1.TaskExecutionStatus
		for _, a := range sinks() {
			statuses = append(statuses, f.status(a, st))
		}
		_, err := f.jm.UpdateTaskExecutionStates(t.ctx, &clusterv1.UpdateTaskExecutionStatesRequest{
			JobId: f.id, JobMasterToken: tk, TaskExecutorId: f.te.id, Statuses: statuses})
		if connect.CodeOf(err) == connect.CodeUnimplemented {
			return stateUpdate(st)(t, f, tk)
		}
		return err
	}
}

var fencedCalls = []fencedCall{
	{name: "offer-slots", send: func(t *T, f *fencing, tk *jobplanev1.FencingToken) error {
		_, err := f.jm.OfferSlots(t.ctx, &clusterv1.OfferSlotsRequest{JobId: f.id, JobMasterToken: tk, TaskExecutorId: f.te.id, Address: f.te.url,
			Offers: []*clusterv1.SlotOffer{{AllocationId: "conformance-forged", SlotIndex: 3}}, DeploymentsInAnswer: true})
		return err
	}},
	{name: "update-state-finished", send: stateUpdate(jobplanev1.ExecutionState_EXECUTION_STATE_FINISHED)},
	{name: "update-state-failed", send: stateUpdate(jobplanev1.ExecutionState_EXECUTION_STATE_FAILED)},
	{name: "update-state-canceled", send: stateUpdate(jobplanev1.ExecutionState_EXECUTION_STATE_CANCELED)},
	{name: "update-states-finished", send: batchUpdate(jobplanev1.ExecutionState_EXECUTION_STATE_FINISHED)},
	{name: "update-states-failed", send: batchUpdate(jobplanev1.ExecutionState_EXECUTION_STATE_FAILED)},
	{name: "update-states-of-jobs", send: func(t *T, f *fencing, tk *jobplanev1.FencingToken) error {
		var statuses []*jobplanev1.TaskExecutionStatus
		for _, a := range sinks() {
			statuses = append(statuses, f.status(a, jobplanev1.ExecutionState_EXECUTION_STATE_FINISHED))
		}
		// Each entry is fenced on its own: the first, with the current
		// token and nothing to report, is taken; the second is judged.
		resp, err := f.jm.UpdateTaskExecutionStatesOfJobs(t.ctx, &clusterv1.UpdateTaskExecutionStatesOfJobsRequest{TaskExecutorId: f.te.id,
			Jobs: []*clusterv1.UpdateTaskExecutionStatesRequest{
				{JobId: f.id, JobMasterToken: protoToken(f.current), TaskExecutorId: f.te.id},
				{JobId: f.id, JobMasterToken: tk, TaskExecutorId: f.te.id, Statuses: statuses},
			}})
		switch {
		case connect.CodeOf(err) == connect.CodeUnimplemented:
			return batchUpdate(jobplanev1.ExecutionState_EXECUTION_STATE_FINISHED)(t, f, tk)
		case err != nil:
			return err
		}
		var second error
		for _, r := range resp.GetRefused() {
			if r.GetIndex() == 0 {
				t.Errorf("update-states-of-jobs refused its first entry, which carries the current token: %v; expected it taken", itemError(r))
			} else if r.GetIndex() == 1 {
				second = itemError(r)
			}
		}
		return second
	}},
	{name: "heartbeat", send: func(t *T, f *fencing, tk *jobplanev1.FencingToken) error {
		var tasks []*jobplanev1.TaskExecutionStatus
		for _, a := range sinks() {
			tasks = append(tasks, f.status(a, jobplanev1.ExecutionState_EXECUTION_STATE_FINISHED))
		}
		_, err := f.jm.Heartbeat(t.ctx, &clusterv1.JobMasterServiceHeartbeatRequest{JobId: f.id, JobMasterToken: tk, TaskExecutorId: f.te.id, Tasks: tasks})
		return err
	}},
	{name: "heartbeat-from-task-executor", anyRefusal: true, send: func(t *T, f *fencing, tk *jobplanev1.FencingToken) error {
		var attempts []*jobplanev1.TaskExecutionStatus
		for _, a := range sinks() {
			attempts = append(attempts, f.status(a, jobplanev1.ExecutionState_EXECUTION_STATE_FINISHED))
		}
		resp, err := f.jm.HeartbeatFromTaskExecutor(t.ctx, &clusterv1.HeartbeatFromTaskExecutorRequest{TaskExecutorId: f.te.id, Address: f.te.url,
			Jobs: []*clusterv1.TaskExecutorJobReport{{JobId: f.id, JobMasterToken: tk, Following: true, Attempts: attempts}}})
		if err != nil {
			return err
		}
		// The answer about the job says how the report was taken: told to
		// follow the current token, it was refused as stale.
		for _, a := range resp.GetJobs() {
			if a.GetJobId() != f.id {
				continue
			}
			switch a.GetAction() {
			case clusterv1.TaskExecutorJobAction_TASK_EXECUTOR_JOB_ACTION_FOLLOW:
				if a.GetJobMasterToken().GetEpoch() != f.current.Epoch || a.GetJobMasterToken().GetSessionId() != f.current.SessionID {
					t.Errorf("heartbeat-from-task-executor told to follow %v; expected the current token %s", a.GetJobMasterToken(), f.current)
				}
				return itemError(&jobplanev1.ItemError{Reason: jobplanev1.ErrorReason_ERROR_REASON_STALE_FENCING_TOKEN, Message: "told to follow the current token"})
			case clusterv1.TaskExecutorJobAction_TASK_EXECUTOR_JOB_ACTION_NOT_LEADER:
				return itemError(&jobplanev1.ItemError{Reason: jobplanev1.ErrorReason_ERROR_REASON_NOT_LEADER, Message: "answered NOT_LEADER"})
			}
		}
		return nil
	}},
	{name: "register-task-executor", send: func(t *T, f *fencing, tk *jobplanev1.FencingToken) error {
		_, err := f.jm.RegisterTaskExecutor(t.ctx, &clusterv1.JobMasterServiceRegisterTaskExecutorRequest{JobId: f.id, JobMasterToken: tk,
			TaskExecutorId: "conformance-forged-te", Address: "http://127.0.0.1:1"})
		return err
	}},
	{name: "disconnect-task-executor", send: func(t *T, f *fencing, tk *jobplanev1.FencingToken) error {
		_, err := f.jm.DisconnectTaskExecutor(t.ctx, &clusterv1.DisconnectTaskExecutorRequest{JobId: f.id, JobMasterToken: tk, TaskExecutorId: f.te.id,
			Reason: "sent with a token not the JobMaster's"})
		return err
	}},
	{name: "declare-resource-requirements", rm: true, newerCode: connect.CodeFailedPrecondition, newerReason: "NOT_REGISTERED", send: func(t *T, f *fencing, tk *jobplanev1.FencingToken) error {
		_, err := f.rm.DeclareResourceRequirements(t.ctx, &clusterv1.DeclareResourceRequirementsRequest{JobId: f.id, JobMasterToken: tk,
			ResourceManagerToken: f.rmToken, Requirements: []*clusterv1.ResourceRequirement{{Slots: 6}}})
		return err
	}},
	{name: "disconnect-job-master", rm: true, send: func(t *T, f *fencing, tk *jobplanev1.FencingToken) error {
		_, err := f.rm.DisconnectJobMaster(t.ctx, &clusterv1.DisconnectJobMasterRequest{JobId: f.id, JobMasterToken: tk,
			ResourceManagerToken: f.rmToken, Reason: "sent with a token not the JobMaster's"})
		return err
	}},
	{name: "register-job-master", rm: true, register: true, send: func(t *T, f *fencing, tk *jobplanev1.FencingToken) error {
		_, err := f.rm.RegisterJobMaster(t.ctx, &clusterv1.RegisterJobMasterRequest{JobId: f.id, JobMasterToken: tk, JobMasterAddress: "http://127.0.0.1:1"})
		return err
	}},
}

// tokenCases are the family "every fenced call × every token that is not
// the current one".
func tokenCases() []Case {
	var out []Case
	for _, call := range fencedCalls {
		out = append(out, Case{Name: "fencing/tokens/" + call.name, Requires: []string{FeatureResourceManager},
			Doc: fmt.Sprintf("%s with the revoked token, forged older tokens of the same and of another session (equal or lower epoch), a newer one and malformed ones: each refused as FencingToken says, and nothing changes", call.name),
			Run: func(t *T) { fencedCallRefused(t, call) }})
	}
	return out
}

// fencedCallRefused runs a gated job, revokes its leadership, and once
// the job runs under its second grant sends call with every other kind of
// token. Each must be refused with the answer the contract gives it, and
// the job must go on as if nothing had been sent: still running, no
// attempt restarted, no slot requested, and once the gate opens FINISHED.
func fencedCallRefused(t *T, call fencedCall) {
	id, revoked, leader := t.revokeRunning()
	f := &fencing{id: id, current: leader.Token, revoked: revoked, te: t.env.tes[0],
		jm: t.jobMaster(leader)}
	if call.rm {
		rmLeader := t.leaderOf(election.JobManager)
		f.rm = t.env.resourceManager(rmLeader)
		f.rmToken = protoToken(rmLeader.Token)
	}
	from := t.env.log.Len()
	for _, kind := range tokenKinds {
		code, why := kind.code, kind.reason
		if call.rm && code != connect.CodeAborted && code != connect.CodeInvalidArgument {
			// A newer job token is no grant of the job's election
			// (RegisterJobMaster); it names no registration (the others).
			code, why = connect.CodeAborted, "STALE_FENCING_TOKEN"
			if !call.register {
				code, why = call.newerCode, call.newerReason
			}
		}
		err := call.send(t, f, kind.token(f.current, f.revoked))
		if code == 0 {
			if err != nil {
				t.Errorf("%s with %s answered %v; expected it taken with nothing done (a newer job token names no registration)", call.name, kind.name, err)
			}
			continue
		}
		if call.anyRefusal && code == connect.CodeInvalidArgument {
			if err == nil {
				t.Errorf("%s with %s was taken; expected it refused", call.name, kind.name)
			}
			continue
		}
		if connect.CodeOf(err) != code || reason(err) != why {
			t.Errorf("%s with %s answered %v; expected %v (%s)", call.name, kind.name, err, code, why)
		}
	}
	t.barrier()
	if st := t.status(id); st != jobplanev1.JobStatus_JOB_STATUS_RUNNING {
		t.Errorf("job %s is %v after the refused calls; expected it still RUNNING, the calls having changed nothing", id, st)
	}
	for _, e := range t.env.log.Events(nil)[from:] {
		if e.Key != id {
			continue
		}
		switch e.Op {
		case "RequestSlot", "SubmitTask", "CancelTask":
			t.Errorf("%v after the refused calls; expected them to change nothing (no slot requested, no task deployed or canceled)", e)
		}
	}
	t.env.open(id)
	if r := t.result(id); r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Errorf("job ended %v (%s); expected FINISHED, no refused call counting", r.GetStatus(), r.GetFailure().GetMessage())
	}
}

// itemError turns an entry's refusal into the error the one-entry call
// would have answered, for comparison: the code the contract pairs with
// the reason, and an ErrorInfo with the reason.
func itemError(item *jobplanev1.ItemError) error {
	name := strings.TrimPrefix(item.GetReason().String(), "ERROR_REASON_")
	code := map[string]connect.Code{"STALE_FENCING_TOKEN": connect.CodeAborted, "NOT_LEADER": connect.CodeUnavailable,
		"INVALID_ARGUMENT": connect.CodeInvalidArgument}[name]
	if code == 0 {
		code = connect.CodeUnknown
	}
	e := connect.NewError(code, fmt.Errorf("entry refused: %s", item.GetMessage()))
	if d, err := connect.NewErrorDetail(&errdetails.ErrorInfo{Reason: name, Domain: "jobplane"}); err == nil {
		e.AddDetail(d)
	}
	return e
}

// rmCalls are the TaskExecutors' calls to the ResourceManager, fenced by
// the ResourceManager's token (the `jobmanager` election's).
var rmCalls = []struct {
	name string
	send func(t *T, rm clusterv1connect.ResourceManagerServiceClient, tk *jobplanev1.FencingToken) error
}{
	{"register-task-executor", func(t *T, rm clusterv1connect.ResourceManagerServiceClient, tk *jobplanev1.FencingToken) error {
		_, err := rm.RegisterTaskExecutor(t.ctx, &clusterv1.ResourceManagerServiceRegisterTaskExecutorRequest{
			TaskExecutorId: "conformance-forged-te", Address: "http://127.0.0.1:1", ResourceManagerToken: tk, Invokables: []string{"noop"}})
		return err
	}},
	{"heartbeat", func(t *T, rm clusterv1connect.ResourceManagerServiceClient, tk *jobplanev1.FencingToken) error {
		_, err := rm.Heartbeat(t.ctx, &clusterv1.ResourceManagerServiceHeartbeatRequest{
			TaskExecutorId: "conformance-forged-te", RegistrationId: "conformance-forged", ResourceManagerToken: tk})
		return err
	}},
}

func rmTokenCases() []Case {
	var out []Case
	for _, call := range rmCalls {
		out = append(out, Case{Name: "fencing/tokens/resource-manager-" + call.name, Requires: []string{FeatureResourceManager},
			Doc: fmt.Sprintf("a TaskExecutor's %s to the ResourceManager with forged older tokens of the same and of another session (equal or lower epoch), a newer one and malformed ones: each refused as FencingToken says, and no TaskExecutor registered", call.name),
			Run: func(t *T) {
				info := t.leaderOf(election.JobManager)
				rm := t.env.resourceManager(info)
				for _, kind := range tokenKinds {
					if kind.name == "the revoked token" {
						continue
					}
					err := call.send(t, rm, kind.token(info.Token, election.Token{}))
					if connect.CodeOf(err) != kind.code || reason(err) != kind.reason {
						t.Errorf("%s with %s answered %v; expected %v (%s)", call.name, kind.name, err, kind.code, kind.reason)
					}
				}
				overview, err := t.dispatcher().GetClusterOverview(t.ctx, &jobplanev1.GetClusterOverviewRequest{})
				if err != nil {
					t.Fatalf("GetClusterOverview: %v", err)
				}
				if n := int(overview.GetTaskExecutorCount()); n != len(t.env.tes) {
					t.Errorf("%d TaskExecutors registered after the refused calls; expected the runner's %d, the calls having changed nothing", n, len(t.env.tes))
				}
			}})
	}
	return out
}

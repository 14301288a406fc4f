package jobstatus

import (
	"fmt"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
)

// Status is a job's status.
type Status = jobplanev1.JobStatus

// Job statuses, shortened.
const (
	Initializing = jobplanev1.JobStatus_JOB_STATUS_INITIALIZING
	Created      = jobplanev1.JobStatus_JOB_STATUS_CREATED
	Running      = jobplanev1.JobStatus_JOB_STATUS_RUNNING
	Failing      = jobplanev1.JobStatus_JOB_STATUS_FAILING
	Failed       = jobplanev1.JobStatus_JOB_STATUS_FAILED
	Cancelling   = jobplanev1.JobStatus_JOB_STATUS_CANCELLING
	Canceled     = jobplanev1.JobStatus_JOB_STATUS_CANCELED
	Finished     = jobplanev1.JobStatus_JOB_STATUS_FINISHED
	Restarting   = jobplanev1.JobStatus_JOB_STATUS_RESTARTING
	Suspended    = jobplanev1.JobStatus_JOB_STATUS_SUSPENDED
)

// jobTransitions lists, for each status, the statuses it may move to, as
// in Flink's JobStatus.
var jobTransitions = map[Status][]Status{
	Initializing: {Created, Cancelling, Canceled, Failed, Suspended},
	Created:      {Running, Failing, Cancelling, Canceled, Failed, Suspended},
	Running:      {Failing, Restarting, Cancelling, Finished, Suspended},
	Failing:      {Failed, Restarting, Cancelling, Suspended},
	Restarting:   {Running, Cancelling, Canceled, Failed, Suspended},
	Cancelling:   {Canceled, Suspended},
}

// CanMove reports whether a job may move from one status to another.
func CanMove(from, to Status) bool {
	for _, s := range jobTransitions[from] {
		if s == to {
			return true
		}
	}
	return false
}

// Move returns to if the job may move there from from, and an error naming
// both otherwise.
func Move(from, to Status) (Status, error) {
	if !CanMove(from, to) {
		return from, fmt.Errorf("jobstatus: illegal transition %v -> %v", from, to)
	}
	return to, nil
}

// IsGloballyTerminal reports whether s ends the job for good: it has a job
// result and never runs again.
func IsGloballyTerminal(s Status) bool {
	return s == Finished || s == Failed || s == Canceled
}

// IsTerminal reports whether s ends the job under its current JobMaster:
// globally terminal, or suspended.
func IsTerminal(s Status) bool { return IsGloballyTerminal(s) || s == Suspended }

// State is an execution attempt's state.
type State = jobplanev1.ExecutionState

// Execution states, shortened.
const (
	ExecCreated      = jobplanev1.ExecutionState_EXECUTION_STATE_CREATED
	ExecScheduled    = jobplanev1.ExecutionState_EXECUTION_STATE_SCHEDULED
	ExecDeploying    = jobplanev1.ExecutionState_EXECUTION_STATE_DEPLOYING
	ExecInitializing = jobplanev1.ExecutionState_EXECUTION_STATE_INITIALIZING
	ExecRunning      = jobplanev1.ExecutionState_EXECUTION_STATE_RUNNING
	ExecFinished     = jobplanev1.ExecutionState_EXECUTION_STATE_FINISHED
	ExecCanceling    = jobplanev1.ExecutionState_EXECUTION_STATE_CANCELING
	ExecCanceled     = jobplanev1.ExecutionState_EXECUTION_STATE_CANCELED
	ExecFailed       = jobplanev1.ExecutionState_EXECUTION_STATE_FAILED
)

// execTransitions lists, for each attempt state, the states it may move
// to, as in Flink's ExecutionState. Any non-terminal state may fail or be
// canceled.
var execTransitions = map[State][]State{
	ExecCreated:      {ExecScheduled, ExecCanceling, ExecCanceled, ExecFailed},
	ExecScheduled:    {ExecDeploying, ExecCanceling, ExecCanceled, ExecFailed},
	ExecDeploying:    {ExecInitializing, ExecRunning, ExecFinished, ExecCanceling, ExecCanceled, ExecFailed},
	ExecInitializing: {ExecRunning, ExecFinished, ExecCanceling, ExecCanceled, ExecFailed},
	ExecRunning:      {ExecFinished, ExecCanceling, ExecCanceled, ExecFailed},
	ExecCanceling:    {ExecCanceled, ExecFailed, ExecFinished},
}

// CanMoveExec reports whether an attempt may move from one state to
// another. Reports can skip states (a task that finishes at once goes from
// DEPLOYING to FINISHED), so the table allows every forward step.
func CanMoveExec(from, to State) bool {
	for _, s := range execTransitions[from] {
		if s == to {
			return true
		}
	}
	return false
}

// IsExecTerminal reports whether an attempt in s is over.
func IsExecTerminal(s State) bool {
	return s == ExecFinished || s == ExecCanceled || s == ExecFailed
}

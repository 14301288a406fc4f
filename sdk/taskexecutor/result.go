package taskexecutor

import (
	"fmt"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/wire/taskvalue"
)

// Task results. A task returns a value (Task.SetValue) and increments
// named accumulators (Task.Add); both travel only with the attempt's
// FINISHED state, in every report of it: the state report, its resend
// with a heartbeat after a lost answer, a complete heartbeat report, and
// the answer to AdoptAttempts. The JobMaster keeps them with the subtask
// and the job's result carries them (JobResult.values and
// .accumulators).

// taskResult is what an attempt returns; te.mu guards it.
type taskResult struct {
	value  []byte
	accums map[string]int64
	// badName is the first invalid accumulator name the task used; it
	// fails the attempt when it finishes.
	badName error
	// final is set once the invokable returned: later calls (from a
	// goroutine the task left behind) change nothing reported.
	final bool
}

// setValue sets the value, unless the result is final.
func (r *taskResult) setValue(v []byte) {
	if !r.final {
		r.value = v
	}
}

// add adds delta to accumulator name, unless the result is final.
func (r *taskResult) add(name string, delta int64) {
	if r.final {
		return
	}
	if _, ok := r.accums[name]; !ok {
		if err := taskvalue.CheckName(name); err != nil {
			if r.badName == nil {
				r.badName = err
			}
			return
		}
	}
	if r.accums == nil {
		r.accums = map[string]int64{}
	}
	r.accums[name] += delta
}

// check reports why a finished attempt's result breaks the limits, or
// nil.
func (r *taskResult) check(maxValue, maxAccumulators int) error {
	r.final = true
	switch {
	case r.badName != nil:
		return fmt.Errorf("the task used an invalid accumulator name: %w", r.badName)
	case len(r.value) > maxValue:
		return fmt.Errorf("the task's value is %d bytes, over the limit of %d (ServerLimits.max_task_value_bytes); return a pointer to larger data", len(r.value), maxValue)
	case len(r.accums) > maxAccumulators:
		return fmt.Errorf("the task used %d accumulators, over the limit of %d (ServerLimits.max_accumulators)", len(r.accums), maxAccumulators)
	}
	return nil
}

// statusLocked is the attempt's current status as every report carries
// it: its state, failure message and, once FINISHED, its result. te.mu
// must be held.
func (t *task) statusLocked() *jobplanev1.TaskExecutionStatus {
	st := &jobplanev1.TaskExecutionStatus{Attempt: t.req.GetAttempt(), State: t.state, FailureMessage: t.failure}
	if t.state == jobplanev1.ExecutionState_EXECUTION_STATE_FINISHED {
		st.Value, st.Accumulators = t.result.value, t.result.accums
	}
	return st
}

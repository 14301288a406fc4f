package chaos

import (
	"fmt"
	"strings"

	"github.com/anishathalye/porcupine"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
)

// ends is a set of globally terminal statuses, those a job may still end
// with (or, once it ended, the one it ended with).
type ends uint8

const (
	endFinished ends = 1 << iota
	endFailed
	endCanceled

	endAny = endFinished | endFailed | endCanceled
)

// endOf returns the terminal status s as a set, or 0 if s is not
// globally terminal.
func endOf(s jobplanev1.JobStatus) ends {
	switch s {
	case jobplanev1.JobStatus_JOB_STATUS_FINISHED:
		return endFinished
	case jobplanev1.JobStatus_JOB_STATUS_FAILED:
		return endFailed
	case jobplanev1.JobStatus_JOB_STATUS_CANCELED:
		return endCanceled
	}
	return 0
}

func (e ends) String() string {
	var names []string
	for _, x := range []struct {
		e    ends
		name string
	}{{endFinished, "FINISHED"}, {endFailed, "FAILED"}, {endCanceled, "CANCELED"}} {
		if e&x.e != 0 {
			names = append(names, x.name)
		}
	}
	return strings.Join(names, "|")
}

// jobState is the state of one job as the contract lets clients see it.
// It is comparable, so porcupine's default equality applies.
type jobState struct {
	// exists: the job's plan is persisted (a submission took effect).
	exists bool
	// plan is the plan it was submitted with, once it exists.
	plan string
	// terminal: the job has a globally terminal status, one of ends.
	terminal bool
	// ends are the terminal statuses it may still reach (not terminal),
	// or the one or two it may have reached (terminal): a cancel
	// answered JOB_TERMINAL says FINISHED or FAILED without saying which.
	// A cancel that took effect on a job not yet terminal narrows them
	// to CANCELED.
	ends ends
}

func (s jobState) String() string {
	switch {
	case !s.exists:
		return "absent"
	case s.terminal:
		return fmt.Sprintf("ended %s", s.ends)
	case s.ends == endCanceled:
		return "cancel requested"
	}
	return "submitted"
}

// observe steps s by an answer that showed the job existing with status
// st: a terminal status must be one the job may have reached, and fixes
// it; a status that is not terminal must come before any terminal one.
func (s jobState) observe(st jobplanev1.JobStatus) (bool, jobState) {
	if !s.exists {
		return false, s
	}
	e := endOf(st)
	if e == 0 {
		return !s.terminal, s
	}
	if s.ends&e == 0 {
		return false, s
	}
	s.terminal, s.ends = true, e
	return true, s
}

// step is the model's step function: whether state s may answer the
// operation in with out, and the state after it.
func step(s jobState, in Input, out Output) (bool, jobState) {
	if out.Outcome == Rejected {
		return true, s
	}
	switch in.Op {
	case OpSubmit:
		switch out.Outcome {
		case Unknown:
			// As if it took effect: the checker places an operation that
			// did not at the end of the history, where this changes
			// nothing that is checked.
			if !s.exists {
				return true, jobState{exists: true, plan: in.Plan, ends: endAny}
			}
			return true, s
		case OK:
			if out.Created {
				// Exactly one submission creates the job.
				if s.exists {
					return false, s
				}
				s = jobState{exists: true, plan: in.Plan, ends: endAny}
				return s.observe(out.Status)
			}
			if !s.exists || s.plan != in.Plan {
				return false, s
			}
			return s.observe(out.Status)
		case AlreadyExists:
			return s.exists && s.plan != in.Plan, s
		}
	case OpCancel:
		switch out.Outcome {
		case Unknown:
			// Had it taken effect, it would only narrow the job's ends
			// to CANCELED, which allows nothing more: the same as
			// placing it at the end of the history, where it changes
			// nothing.
			return true, s
		case OK:
			// Accepted while the job runs, or again once it is
			// CANCELLING or CANCELED: it ends CANCELED.
			if !s.exists || s.ends&endCanceled == 0 {
				return false, s
			}
			s.ends = endCanceled
			if s.terminal {
				return out.Status == jobplanev1.JobStatus_JOB_STATUS_CANCELED, s
			}
			return s.observe(out.Status)
		case JobTerminal:
			// The job FINISHED or FAILED.
			e := s.ends & (endFinished | endFailed)
			if !s.exists || e == 0 {
				return false, s
			}
			s.terminal, s.ends = true, e
			return true, s
		case NotFound:
			return !s.exists, s
		}
	case OpObserve:
		switch out.Outcome {
		case Unknown:
			return true, s
		case OK:
			return s.observe(out.Status)
		case NotFound:
			// An acknowledged job is never lost, nor seen before it was
			// submitted.
			return !s.exists, s
		case NotTerminal:
			return s.exists && !s.terminal, s
		}
	}
	return false, s
}

// Model is the porcupine model of the contract's promises for jobs, one
// partition per job id, over histories of Input and Output:
//
//   - a job acknowledged as submitted is never NOT_FOUND afterwards, and
//     none is seen before a submission of it was called;
//   - once a globally terminal status is seen, every later answer shows
//     the same one (exactly one terminal state);
//   - a cancel acknowledged OK ends the job CANCELED; a cancel answered
//     JOB_TERMINAL means it FINISHED or FAILED;
//   - of the submissions of a job, one is told created=true, the others
//     (same plan) created=false, and another plan is ALREADY_EXISTS.
//
// A job's state is absent, submitted, cancel requested, or ended with a
// status. Operations of Unknown outcome are allowed to take effect at any
// point after their call, or never.
var Model = porcupine.Model{
	Partition: partitionByJob,
	Init:      func() interface{} { return jobState{} },
	Step: func(state, input, output interface{}) (bool, interface{}) {
		return step(state.(jobState), input.(Input), output.(Output))
	},
	DescribeOperation: func(input, output interface{}) string {
		return describe(input.(Input), output.(Output))
	},
	DescribeState: func(state interface{}) string { return state.(jobState).String() },
}

// partitionByJob splits a history into one partition per job id, in the
// order the ids first appear.
func partitionByJob(history []porcupine.Operation) [][]porcupine.Operation {
	index := make(map[string]int)
	var parts [][]porcupine.Operation
	for _, op := range history {
		id := op.Input.(Input).JobID
		i, ok := index[id]
		if !ok {
			i = len(parts)
			index[id] = i
			parts = append(parts, nil)
		}
		parts[i] = append(parts[i], op)
	}
	return parts
}

// describe renders an operation for the visualization, such as
// "submit(j1) -> created RUNNING".
func describe(in Input, out Output) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s(%s) -> %s", in.Op, in.JobID, out.Outcome)
	if out.Outcome == OK {
		if in.Op == OpSubmit {
			fmt.Fprintf(&b, " created=%t", out.Created)
		}
		fmt.Fprintf(&b, " %s", strings.TrimPrefix(out.Status.String(), "JOB_STATUS_"))
	}
	return b.String()
}

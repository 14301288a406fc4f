package chaos

import (
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
)

// Op is the kind of a recorded operation.
type Op int

const (
	// OpSubmit is a SubmitJob call.
	OpSubmit Op = iota + 1
	// OpCancel is a CancelJob call.
	OpCancel
	// OpObserve is a call that reads a job's status: GetJob or
	// GetJobResult.
	OpObserve
)

// String returns the operation's name, such as "submit".
func (o Op) String() string {
	switch o {
	case OpSubmit:
		return "submit"
	case OpCancel:
		return "cancel"
	case OpObserve:
		return "observe"
	}
	return fmt.Sprintf("op(%d)", int(o))
}

// Input is what a recorded operation asked: the Input of its
// porcupine.Operation.
type Input struct {
	// Op is the kind of call.
	Op Op
	// JobID is the job it was about; the history is partitioned by it.
	JobID string
	// Plan identifies the submitted plan (OpSubmit only): two submissions
	// have the same plan if and only if their Plans are equal. The
	// interceptor uses the hex of planid.Digest.
	Plan string
}

// Outcome is how a recorded operation ended.
type Outcome int

const (
	// Unknown: the call failed in a way that does not tell whether it
	// took effect (UNAVAILABLE, a timeout, a connection cut off). Such an
	// operation is recorded as returning at the end of the history, so
	// that the checker may place its effect anywhere after its call, or
	// nowhere. An observation with this outcome tells nothing and is not
	// recorded.
	Unknown Outcome = iota
	// OK: the call succeeded; Output.Created and Output.Status say more.
	OK
	// NotFound: NOT_FOUND (JOB_NOT_FOUND).
	NotFound
	// JobTerminal: CancelJob answered FAILED_PRECONDITION (JOB_TERMINAL),
	// the job FINISHED or FAILED.
	JobTerminal
	// NotTerminal: GetJobResult without wait answered
	// FAILED_PRECONDITION (JOB_NOT_TERMINAL).
	NotTerminal
	// AlreadyExists: SubmitJob answered ALREADY_EXISTS
	// (JOB_ALREADY_EXISTS), the id is taken by another plan.
	AlreadyExists
	// Rejected: the call certainly did nothing (INVALID_ARGUMENT, or
	// CANCEL_NOT_RECORDED), and tells nothing about the job.
	Rejected
)

// String returns the outcome's name, such as "not-found".
func (o Outcome) String() string {
	switch o {
	case Unknown:
		return "unknown"
	case OK:
		return "ok"
	case NotFound:
		return "not-found"
	case JobTerminal:
		return "job-terminal"
	case NotTerminal:
		return "not-terminal"
	case AlreadyExists:
		return "already-exists"
	case Rejected:
		return "rejected"
	}
	return fmt.Sprintf("outcome(%d)", int(o))
}

// Output is what a recorded operation answered: the Output of its
// porcupine.Operation.
type Output struct {
	// Outcome is how the call ended.
	Outcome Outcome
	// Created is SubmitJobResponse.created (OpSubmit with OK).
	Created bool
	// Status is the job's status in the answer (with OK): the
	// SubmitJobResponse's or CancelJobResponse's status, the summary's
	// status of GetJob, the result's status of GetJobResult.
	Status jobplanev1.JobStatus
}

// Recorder logs operations with the times they were called and answered,
// on one monotonic clock. It is safe for concurrent use. Each operation in
// flight gets a lane (the porcupine ClientId, which only the
// visualization uses): the lowest one free. An operation of unknown
// outcome keeps its lane to the end of the history, as a crashed Jepsen
// process does.
type Recorder struct {
	start time.Time

	mu     sync.Mutex
	ops    []porcupine.Operation
	open   map[*Pending]struct{}
	lanes  []bool // lanes[i]: lane i is taken
	faults []porcupine.Annotation
}

// NewRecorder returns an empty Recorder whose clock starts now.
func NewRecorder() *Recorder {
	return &Recorder{start: time.Now(), open: make(map[*Pending]struct{})}
}

// Pending is an operation that was called and has not returned yet.
type Pending struct {
	r    *Recorder
	in   Input
	call int64
	lane int
	done bool
}

// now is the time since the Recorder's start, in nanoseconds, on the
// monotonic clock.
func (r *Recorder) now() int64 { return int64(time.Since(r.start)) }

// Call records that an operation with input in is called now. The caller
// reports its answer with Pending.Return; an operation that never
// returns is in the history with an Unknown outcome.
func (r *Recorder) Call(in Input) *Pending {
	r.mu.Lock()
	defer r.mu.Unlock()
	lane := 0
	for lane < len(r.lanes) && r.lanes[lane] {
		lane++
	}
	if lane == len(r.lanes) {
		r.lanes = append(r.lanes, false)
	}
	r.lanes[lane] = true
	p := &Pending{r: r, in: in, lane: lane, call: r.now()}
	r.open[p] = struct{}{}
	return p
}

// Return records that the operation was answered now with out. An
// Unknown outcome is recorded as returning at the end of the history; an
// observation of Unknown outcome is dropped. Only the first Return of an
// operation counts.
func (p *Pending) Return(out Output) {
	r := p.r
	ret := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if p.done {
		return
	}
	p.done = true
	delete(r.open, p)
	if out.Outcome == Unknown && p.in.Op == OpObserve {
		r.lanes[p.lane] = false
		return
	}
	if out.Outcome == Unknown {
		// The lane stays taken: the operation may take effect until the
		// end of the history.
		ret = math.MaxInt64
	} else {
		r.lanes[p.lane] = false
	}
	r.ops = append(r.ops, porcupine.Operation{ClientId: p.lane, Input: p.in, Call: p.call, Output: out, Return: ret})
}

// Operations returns the history so far: every returned operation, and
// every operation still in flight with an Unknown outcome (observations
// in flight are left out). The Recorder keeps recording.
func (r *Recorder) Operations() []porcupine.Operation {
	r.mu.Lock()
	defer r.mu.Unlock()
	ops := append([]porcupine.Operation(nil), r.ops...)
	for p := range r.open {
		if p.in.Op == OpObserve {
			continue
		}
		ops = append(ops, porcupine.Operation{ClientId: p.lane, Input: p.in, Call: p.call, Output: Output{Outcome: Unknown}, Return: math.MaxInt64})
	}
	return ops
}

// Fault records that a fault described by what (such as "SIGKILL
// jobmanager-0") begins now; calling the function it returns records its
// end. Faults are shown in the visualization beside the operations.
func (r *Recorder) Fault(what string) (end func()) {
	start := r.now()
	return func() {
		stop := r.now()
		r.mu.Lock()
		defer r.mu.Unlock()
		r.faults = append(r.faults, porcupine.Annotation{Tag: "faults", Start: start, End: stop, Description: what,
			Details: fmt.Sprintf("%s from %v to %v", what, time.Duration(start), time.Duration(stop)), BackgroundColor: "#f7c6c6"})
	}
}

// Faults returns the faults recorded so far, as annotations for
// CheckHistory.
func (r *Recorder) Faults() []porcupine.Annotation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]porcupine.Annotation(nil), r.faults...)
}

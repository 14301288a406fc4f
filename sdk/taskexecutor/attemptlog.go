package taskexecutor

import (
	"encoding/json"
	"io"
	"sync"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
)

// AttemptRecord is one line of a TaskExecutor's attempt log: an execution
// attempt started or stopped running here. The log is the TaskExecutor's
// own account of what ran when, for checking from outside that no subtask
// ever ran twice at once.
type AttemptRecord struct {
	// Event is "start" (the invokable is called) or "stop" (it returned).
	Event string `json:"event"`
	// TaskExecutor is the TaskExecutor's id.
	TaskExecutor string `json:"task_executor"`
	// JobID, VertexID, SubtaskIndex and Attempt identify the attempt.
	JobID        string `json:"job_id"`
	VertexID     string `json:"vertex_id"`
	SubtaskIndex int    `json:"subtask_index"`
	Attempt      int    `json:"attempt"`
	// Epoch is the epoch of the token of the JobMaster that deployed it.
	Epoch uint64 `json:"epoch"`
	// State is the attempt's terminal state, on "stop": FINISHED, FAILED
	// or CANCELED.
	State string `json:"state,omitempty"`
	// Time is when it happened.
	Time time.Time `json:"time"`
}

// attemptLog writes AttemptRecords as JSON lines, one write per record.
type attemptLog struct {
	mu  sync.Mutex
	enc *json.Encoder
}

func newAttemptLog(w io.Writer) *attemptLog {
	if w == nil {
		return nil
	}
	return &attemptLog{enc: json.NewEncoder(w)}
}

// record logs an event of the attempt that req deployed; a nil log
// records nothing.
func (l *attemptLog) record(te, event string, t *task, state jobplanev1.ExecutionState) {
	if l == nil {
		return
	}
	a := t.req.GetAttempt()
	r := AttemptRecord{
		Event: event, TaskExecutor: te, JobID: t.req.GetJobId(), VertexID: a.GetVertexId(),
		SubtaskIndex: int(a.GetSubtaskIndex()), Attempt: int(a.GetAttemptNumber()), Epoch: t.deployed.Epoch, Time: time.Now(),
	}
	if event == "stop" {
		r.State = state.String()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	// Encode writes each record in one Write call.
	_ = l.enc.Encode(r)
}

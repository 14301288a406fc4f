package clustertest

import (
	"context"
	"fmt"
	"sync"

	"connectrpc.com/connect"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
)

// TaskEvent is one task call at a TaskExecutor, as its Connect
// interceptors saw it: a SubmitTask or CancelTask it received, or an
// UpdateTaskExecutionState it sent.
type TaskEvent struct {
	Seq          int    // order across all TaskExecutors of the cluster
	TaskExecutor string // the TaskExecutor's id
	Method       string // "SubmitTask", "CancelTask" or "UpdateTaskExecutionState"
	JobID        string
	Attempt      *jobplanev1.ExecutionAttemptId
	State        jobplanev1.ExecutionState // UpdateTaskExecutionState only
	Token        *jobplanev1.FencingToken
}

func (e TaskEvent) String() string {
	a := e.Attempt
	s := fmt.Sprintf("#%d %s %s %s/%d#%d", e.Seq, e.TaskExecutor, e.Method, a.GetVertexId(), a.GetSubtaskIndex(), a.GetAttemptNumber())
	if e.State != 0 {
		s += " " + e.State.String()
	}
	return s
}

// TaskLog records the task calls of a cluster's TaskExecutors in the order
// they happen: a call a TaskExecutor sends is recorded before it leaves, a
// call it receives before it is handled, so an event that caused another
// is always recorded first.
type TaskLog struct {
	mu     sync.Mutex
	events []TaskEvent
}

// Events returns a copy of the events so far.
func (l *TaskLog) Events() []TaskEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]TaskEvent(nil), l.events...)
}

func (l *TaskLog) add(e TaskEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e.Seq = len(l.events)
	l.events = append(l.events, e)
}

// interceptor records for one TaskExecutor.
func (l *TaskLog) interceptor(te *string) connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			e := TaskEvent{TaskExecutor: *te}
			switch m := req.Any().(type) {
			case *jobplanev1.SubmitTaskRequest:
				e.Method, e.JobID, e.Attempt, e.Token = "SubmitTask", m.GetJobId(), m.GetAttempt(), m.GetJobMasterToken()
			case *jobplanev1.CancelTaskRequest:
				e.Method, e.JobID, e.Attempt, e.Token = "CancelTask", m.GetJobId(), m.GetAttempt(), m.GetJobMasterToken()
			case *jobplanev1.UpdateTaskExecutionStateRequest:
				e.Method, e.JobID, e.Attempt, e.Token = "UpdateTaskExecutionState", m.GetJobId(), m.GetStatus().GetAttempt(), m.GetJobMasterToken()
				e.State = m.GetStatus().GetState()
			}
			if e.Method != "" {
				l.add(e)
			}
			return next(ctx, req)
		}
	}
}

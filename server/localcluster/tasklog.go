package localcluster

import (
	"context"
	"fmt"
	"sync"

	"connectrpc.com/connect"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
)

// TaskEvent is one task call at a TaskExecutor, as its Connect
// interceptors saw it: a SubmitTask or CancelTask it received, or an
// UpdateTaskExecutionState it sent. A batch call counts as its items: each
// attempt of a SubmitTasks, or of an OfferSlots answer, is a SubmitTask
// event, each change of an UpdateTaskExecutionStates (or of an
// UpdateTaskExecutionStatesOfJobs) an UpdateTaskExecutionState event.
type TaskEvent struct {
	Seq          int    // order across all TaskExecutors of the cluster
	TaskExecutor string // the TaskExecutor's id
	Method       string // "SubmitTask", "CancelTask" or "UpdateTaskExecutionState"
	JobID        string
	Attempt      *jobplanev1.ExecutionAttemptId
	State        jobplanev1.ExecutionState // UpdateTaskExecutionState only
	Token        *jobplanev1.FencingToken
}

// String describes the event on one line: its order, TaskExecutor,
// method and attempt, and the state it reports.
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

// add records the events of one call at TaskExecutor te, in order and
// together.
func (l *TaskLog) add(te string, events []TaskEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range events {
		e.Seq, e.TaskExecutor = len(l.events), te
		l.events = append(l.events, e)
	}
}

// interceptor records for one TaskExecutor.
func (l *TaskLog) interceptor(te *string) connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			var events []TaskEvent
			switch m := req.Any().(type) {
			case *clusterv1.SubmitTaskRequest:
				events = append(events, TaskEvent{Method: "SubmitTask", JobID: m.GetJobId(), Attempt: m.GetAttempt(), Token: m.GetJobMasterToken()})
			case *clusterv1.SubmitTasksRequest:
				for _, d := range m.GetTasks() {
					events = append(events, TaskEvent{Method: "SubmitTask", JobID: m.GetJobId(), Attempt: d.GetAttempt(), Token: m.GetJobMasterToken()})
				}
			case *clusterv1.CancelTaskRequest:
				events = append(events, TaskEvent{Method: "CancelTask", JobID: m.GetJobId(), Attempt: m.GetAttempt(), Token: m.GetJobMasterToken()})
			case *clusterv1.UpdateTaskExecutionStateRequest:
				events = append(events, TaskEvent{Method: "UpdateTaskExecutionState", JobID: m.GetJobId(), Attempt: m.GetStatus().GetAttempt(),
					State: m.GetStatus().GetState(), Token: m.GetJobMasterToken()})
			case *clusterv1.UpdateTaskExecutionStatesRequest:
				events = append(events, stateEvents(m)...)
			case *clusterv1.UpdateTaskExecutionStatesOfJobsRequest:
				for _, e := range m.GetJobs() {
					events = append(events, stateEvents(e)...)
				}
			}
			l.add(*te, events)
			resp, err := next(ctx, req)
			// Deployments in an offer's answer are received as the
			// answer is, before they are handled.
			if offer, ok := req.Any().(*clusterv1.OfferSlotsRequest); ok && err == nil {
				var deployed []TaskEvent
				for _, d := range resp.Any().(*clusterv1.OfferSlotsResponse).GetDeployments() {
					deployed = append(deployed, TaskEvent{Method: "SubmitTask", JobID: offer.GetJobId(), Attempt: d.GetAttempt(), Token: offer.GetJobMasterToken()})
				}
				l.add(*te, deployed)
			}
			return resp, err
		}
	}
}

// stateEvents are the UpdateTaskExecutionState events of one job's
// batch of state changes.
func stateEvents(m *clusterv1.UpdateTaskExecutionStatesRequest) []TaskEvent {
	var events []TaskEvent
	for _, st := range m.GetStatuses() {
		events = append(events, TaskEvent{Method: "UpdateTaskExecutionState", JobID: m.GetJobId(), Attempt: st.GetAttempt(),
			State: st.GetState(), Token: m.GetJobMasterToken()})
	}
	return events
}

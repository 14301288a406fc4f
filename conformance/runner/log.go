package runner

import (
	"fmt"
	"strings"
	"sync"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
)

// Event is one observation of a case: a call the server made to the
// runner's HA store or TaskExecutors, a call a TaskExecutor made to the
// server, or an answer the runner's client got. Events are numbered in
// the order they happened; an event that caused another always comes
// first.
type Event struct {
	Seq    int
	Time   time.Time
	Source string // "store", a TaskExecutor's id, or "client"
	// Op is the call: for the store "campaign", "granted", "confirm",
	// "resign", "put-plan", "delete-plan", "request-cancel",
	// "create-dirty", "mark-clean", "delete-result", "list-plans",
	// "get-plan", "list-results", "get-result", "keep-alive", "add-member",
	// "remove-member", "list-members", "add-checkpoint",
	// "latest-checkpoint", "list-checkpoints", "add-savepoint",
	// "get-savepoint", "list-savepoints", "delete-savepoint",
	// "open-session" (Detail: the TTL asked for); for
	// TaskExecutors the RPC's name; for the client "ack" (a SubmitJob
	// answer), the name of another Dispatcher call it made, "fault" (an
	// injected fault), "revoke", "expire", "seed" (a write of its own), and
	// "kill", "stop", "pause", "resume", "start" of a server instance, and
	// "cut" (Detail: the TaskExecutor cut off the network).
	Op      string
	Key     string         // the job id, or the election
	Token   election.Token // the token the call carried, or was granted
	Attempt string         // vertex/subtask#attempt, for task calls
	State   jobplanev1.ExecutionState
	Status  jobplanev1.JobStatus // the job's status a client call answered
	Err     error
	// Applied: a store write that took effect (even if its answer was
	// then lost), or a write the runner made itself.
	Applied bool
	Detail  string
	// Sent, for a client's call to the Dispatcher, is the log's length
	// when the call was sent: the call overlaps the events from Sent to
	// its own, and its answer may reflect a state before any of them.
	Sent int
}

func (e Event) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "#%d %s %s %s", e.Seq, e.Source, e.Op, e.Key)
	if !e.Token.IsZero() {
		fmt.Fprintf(&b, " token=%s", e.Token)
	}
	if e.Attempt != "" {
		fmt.Fprintf(&b, " attempt=%s", e.Attempt)
	}
	if e.State != 0 {
		fmt.Fprintf(&b, " %s", strings.TrimPrefix(e.State.String(), "EXECUTION_STATE_"))
	}
	if e.Status != 0 {
		fmt.Fprintf(&b, " status=%s", strings.TrimPrefix(e.Status.String(), "JOB_STATUS_"))
	}
	if e.Detail != "" {
		fmt.Fprintf(&b, " %s", e.Detail)
	}
	if e.Err != nil {
		fmt.Fprintf(&b, " err=%v", e.Err)
		if e.Applied {
			b.WriteString(" (applied)")
		}
	}
	return b.String()
}

// Log is the ordered event log of one environment.
type Log struct {
	mu     sync.Mutex
	events []Event
}

// Add appends e and returns its sequence number.
func (l *Log) Add(e Event) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	e.Seq = len(l.events)
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	l.events = append(l.events, e)
	return e.Seq
}

// Events returns the events so far that match f (all if f is nil).
func (l *Log) Events(f func(Event) bool) []Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Event
	for _, e := range l.events {
		if f == nil || f(e) {
			out = append(out, e)
		}
	}
	return out
}

// Len returns the number of events so far.
func (l *Log) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.events)
}

func attemptKey(a *jobplanev1.ExecutionAttemptId) string {
	if a == nil {
		return ""
	}
	return fmt.Sprintf("%s/%d#%d", a.GetVertexId(), a.GetSubtaskIndex(), a.GetAttemptNumber())
}

func token(t *jobplanev1.FencingToken) election.Token {
	return election.Token{SessionID: t.GetSessionId(), Epoch: t.GetEpoch()}
}

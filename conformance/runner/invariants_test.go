package runner

import (
	"errors"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
)

// The one-attempt-at-a-time invariant flags a start of a subtask while
// another attempt of it runs, on the same TaskExecutor or another, and
// nothing else.
func TestOneAttemptAtATime(t *testing.T) {
	ev := func(source, op, attempt string) Event {
		return Event{Source: source, Op: "attempt-" + op, Key: "j", Attempt: attempt}
	}
	for _, tc := range []struct {
		name   string
		events []Event
		bad    bool
	}{
		{"in turn", []Event{ev("te-0", "start", "v/0#0"), ev("te-0", "stop", "v/0#0"), ev("te-1", "start", "v/0#1"), ev("te-1", "stop", "v/0#1")}, false},
		{"two subtasks at once", []Event{ev("te-0", "start", "v/0#0"), ev("te-1", "start", "v/1#0"), ev("te-0", "stop", "v/0#0")}, false},
		{"restarted while it ran", []Event{ev("te-0", "start", "v/0#0"), ev("te-1", "start", "v/0#1")}, true},
		{"the same attempt twice", []Event{ev("te-0", "start", "v/0#0"), ev("te-1", "start", "v/0#0")}, true},
		{"another's stop does not end it", []Event{ev("te-0", "start", "v/0#0"), ev("te-1", "stop", "v/0#0"), ev("te-1", "start", "v/0#1")}, true},
	} {
		tr := &trace{jobs: map[string][]Event{"j": tc.events}, order: []string{"j"}}
		got := oneAttemptAtATime(tr)
		if (len(got) > 0) != tc.bad {
			t.Errorf("%s: %q; want a violation: %v", tc.name, strings.Join(got, "; "), tc.bad)
		}
	}
}

// events numbers evs in order, each at (its At) seconds after a start.
func events(evs ...timed) []Event {
	start := time.Unix(1_000_000, 0)
	out := make([]Event, len(evs))
	for i, e := range evs {
		e.Event.Seq = i
		e.Event.Time = start.Add(time.Duration(e.at * float64(time.Second)))
		out[i] = e.Event
	}
	return out
}

type timed struct {
	at float64
	Event
}

func errorInfo(code connect.Code, reason string, md map[string]string) error {
	err := connect.NewError(code, errors.New(strings.ToLower(reason)))
	d, _ := connect.NewErrorDetail(&errdetails.ErrorInfo{Reason: reason, Metadata: md})
	err.AddDetail(d)
	return err
}

// Each strengthened invariant flags the traces its former, weaker
// version let pass (the "bad" rows), and still lets pass what the
// contract allows.
func TestStrengthenedInvariants(t *testing.T) {
	a1 := election.Token{SessionID: "a", Epoch: 1}
	b2 := election.Token{SessionID: "b", Epoch: 2}
	grant := func(at float64, key string, tk election.Token) timed {
		return timed{at, Event{Source: "store", Op: "granted", Key: key, Token: tk, Applied: true}}
	}
	deploy := func(at float64, op string, tk election.Token) timed {
		return timed{at, Event{Source: "te-0", Op: op, Key: "j", Token: tk, Attempt: "v/0#0"}}
	}
	reported := func(at float64, tk election.Token) timed {
		return timed{at, Event{Source: "store", Op: "reported-revoked", Key: "j", Token: tk}}
	}
	snapshot := func(at float64, session, held string) timed {
		return timed{at, Event{Source: "store", Op: "watch-snapshot", Key: session, Detail: held}}
	}
	client := func(at float64, op string, sent int, st jobplanev1.JobStatus, err error) timed {
		return timed{at, Event{Source: "client", Op: op, Key: "j", Sent: sent, Status: st, Err: err}}
	}
	peer := func(session, addr string) timed {
		return timed{0, Event{Source: "store", Op: "session-peer", Key: session, Peer: addr}}
	}
	write := func(op string, tk election.Token, addr string) timed {
		return timed{1, Event{Source: "store", Op: op, Key: "j", Token: tk, Applied: true, Peer: addr}}
	}
	canceled, finished := jobplanev1.JobStatus_JOB_STATUS_CANCELED, jobplanev1.JobStatus_JOB_STATUS_FINISHED
	running := jobplanev1.JobStatus_JOB_STATUS_RUNNING
	terminal := func(st jobplanev1.JobStatus) error {
		return errorInfo(connect.CodeFailedPrecondition, "JOB_TERMINAL", map[string]string{"job_id": "j", "status": st.String()})
	}
	exists := func(g string) error {
		return errorInfo(connect.CodeAlreadyExists, "JOB_ALREADY_EXISTS", map[string]string{"job_id": "j", "globally_terminated": g})
	}
	for _, tc := range []struct {
		name   string
		check  func(*trace) []string
		events []timed
		bad    bool
	}{
		{"deploy: in flight as the end is reported", deployUnderGrantedTokens, []timed{grant(0, "j", a1), reported(1, a1), deploy(2, "SubmitTask", a1)}, false},
		{"deploy: long after the end was reported", deployUnderGrantedTokens, []timed{grant(0, "j", a1), reported(1, a1), deploy(5, "SubmitTask", a1)}, true},
		{"slot request: long after a newer grant", deployUnderGrantedTokens, []timed{grant(0, "j", a1), grant(1, "j", b2), deploy(5, "RequestSlot", a1)}, true},
		{"deploy: revoked by the runner, not reported yet", deployUnderGrantedTokens, []timed{
			grant(0, "j", a1), {0.5, Event{Source: "client", Op: "revoke", Key: "j", Token: a1}}, grant(1, "j", b2), deploy(5, "SubmitTask", a1)}, false},
		{"deploy: revoked, then a snapshot without it", deployUnderGrantedTokens, []timed{
			grant(0, "j", a1), {0.5, Event{Source: "client", Op: "revoke", Key: "j", Token: a1}}, snapshot(2, "a", "jobmanager=a@7"), deploy(6, "SubmitTask", a1)}, true},
		{"deploy: a snapshot that still lists it", deployUnderGrantedTokens, []timed{grant(0, "j", a1), snapshot(2, "a", "job/j=a@1"), deploy(6, "SubmitTask", a1)}, false},
		{"deploy: reported while the server was paused", deployUnderGrantedTokens, []timed{
			grant(0, "j", a1), {0.5, Event{Source: "client", Op: "pause", Key: "s0"}}, reported(1, a1),
			{10, Event{Source: "client", Op: "resume", Key: "s0"}}, deploy(11, "SubmitTask", a1)}, false},
		{"terminal: JOB_TERMINAL of another status", terminalIsFinal, []timed{
			client(0, "GetJob", 0, canceled, nil), client(1, "CancelJob", 1, 0, terminal(finished))}, true},
		{"terminal: JOB_TERMINAL of the same status", terminalIsFinal, []timed{
			client(0, "GetJob", 0, finished, nil), client(1, "CancelJob", 1, 0, terminal(finished))}, false},
		{"terminal: globally_terminated=false after the end", terminalIsFinal, []timed{
			client(0, "GetJob", 0, finished, nil), client(1, "ack", 1, 0, exists("false"))}, true},
		{"terminal: globally_terminated=true, then RUNNING", terminalIsFinal, []timed{
			client(0, "ack", 0, 0, exists("true")), client(1, "GetJob", 1, running, nil)}, true},
		{"terminal: JOB_NOT_TERMINAL sent before the end's answer", terminalIsFinal, []timed{
			client(0, "GetJob", 0, finished, nil), client(1, "GetJobResult", 0, 0, errorInfo(connect.CodeFailedPrecondition, "JOB_NOT_TERMINAL", map[string]string{"status": running.String()}))}, false},
		{"result: JOB_TERMINAL before the result", terminalAfterTheResult, []timed{
			client(0, "CancelJob", 0, 0, terminal(finished)), {1, Event{Source: "store", Op: "create-dirty", Key: "j", Applied: true}}}, true},
		{"writes: from the holder", writesByTheLeader, []timed{peer("a", "p1"), peer("b", "p2"), grant(0, election.JobManager, a1), write("put-plan", a1, "p1")}, false},
		{"writes: a standby sends the leader's token", writesByTheLeader, []timed{peer("a", "p1"), peer("b", "p2"), grant(0, election.JobManager, a1), write("put-plan", a1, "p2")}, true},
		{"writes: a stale write by its former holder", writesByTheLeader, []timed{peer("a", "p1"), peer("b", "p2"), grant(0, election.JobManager, a1), grant(0, election.JobManager, b2), write("request-cancel", a1, "p1")}, false},
		{"writes: another connection of the holder", writesByTheLeader, []timed{peer("a", "p1"), peer("a", "p3"), grant(0, election.JobManager, a1), write("create-dirty", a1, "p3")}, false},
		{"writes: a leading process's other connection and session", writesByTheLeader, []timed{peer("a", "p1"), peer("c", "p2"), grant(0, election.JobManager, a1), grant(0, "j", election.Token{SessionID: "c", Epoch: 3}), write("put-plan", a1, "p2")}, false},
		{"writes: a peer that made no session call", writesByTheLeader, []timed{peer("a", "p1"), grant(0, election.JobManager, a1), write("put-plan", a1, "p9")}, false},
		{"writes: a resignation sent by another process", writesByTheLeader, []timed{peer("a", "p1"), peer("b", "p2"), grant(0, "j", a1), write("resign", a1, "p2")}, true},
	} {
		tr := newTrace(events(tc.events...), 0, "j")
		got := tc.check(tr)
		if (len(got) > 0) != tc.bad {
			t.Errorf("%s: %q; want a violation: %v", tc.name, strings.Join(got, "; "), tc.bad)
		}
	}
}

// A deployment under a token after its holder campaigned again for the
// job is late at once: the holder knew its leadership had ended.
func TestDeployAfterTheHoldersCampaign(t *testing.T) {
	a1 := election.Token{SessionID: "a", Epoch: 1}
	for _, tc := range []struct {
		name    string
		session string
		bad     bool
	}{{"its holder campaigned", "a", true}, {"another session campaigned", "b", false}} {
		tr := newTrace(events(
			timed{0, Event{Source: "store", Op: "granted", Key: "j", Token: a1, Applied: true}},
			timed{1, Event{Source: "store", Op: "campaign", Key: "j", Detail: "session=" + tc.session}},
			timed{1.01, Event{Source: "te-0", Op: "SubmitTask", Key: "j", Token: a1, Attempt: "v/0#0"}},
		), 0, "j")
		if got := deployUnderGrantedTokens(tr); (len(got) > 0) != tc.bad {
			t.Errorf("%s: %q; want a violation: %v", tc.name, strings.Join(got, "; "), tc.bad)
		}
	}
}

// A deleted result ends a run of its job id: a submission after it
// creates another run, which may run, without breaking created-once or
// nothing-runs-after-the-result; before the deletion, both are broken.
func TestRunsSplitAtTheResultsDeletion(t *testing.T) {
	seq := 0
	ev := func(source, op, detail string, applied bool) Event {
		seq++
		return Event{Seq: seq, Source: source, Op: op, Key: "c1-j", Detail: detail, Applied: applied}
	}
	run := func(deleted bool) []string {
		seq = 0
		events := []Event{
			ev("client", "ack", "created=true", false),
			ev("store", "create-dirty", "", true),
			ev("store", "delete-result", "", deleted),
			ev("client", "ack", "created=true", false),
			ev("store", "campaign", "", true),
		}
		tr := newTrace(events, 0, "c1-")
		return append(createdOnce(tr), nothingRunsAfterTheResult(tr)...)
	}
	if got := run(true); len(got) > 0 {
		t.Errorf("a new run after the result's deletion: %q; want no violation", strings.Join(got, "; "))
	}
	if got := run(false); len(got) != 2 {
		t.Errorf("a second creation without the result's deletion: %q; want created-once and nothing-runs-after-the-result broken", strings.Join(got, "; "))
	}
}

package runner

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
)

// The invariants are promises of the contract that hold on every trace,
// whatever a case tested: after every case the runner checks the case's
// whole event log against each of them.
var invariants = []struct {
	name  string
	check func(tr *trace) []string
}{
	{"persist-before-ack", persistBeforeAck},
	{"persist-before-run", persistBeforeRun},
	{"created-once", createdOnce},
	{"writes-by-the-leader", writesByTheLeader},
	{"deploy-under-granted-tokens", deployUnderGrantedTokens},
	{"cleanup-order", cleanupOrder},
	{"nothing-runs-after-the-result", nothingRunsAfterTheResult},
	{"acknowledged-jobs-stay-known", acknowledgedJobsStayKnown},
	{"terminal-is-final", terminalIsFinal},
	{"terminal-after-the-result", terminalAfterTheResult},
	{"one-attempt-at-a-time", oneAttemptAtATime},
}

// trace is what the invariants check: the case's events, by job, and
// what the whole log says about leaderships and processes (a grant may
// predate the case on a shared store).
//
// A job id may have several runs (since 1.2): once a job's result is
// deleted (PurgeJob, a submission with JOB_ID_REUSE_POLICY_ALLOW_DUPLICATE,
// retention), the id is free and a later submission starts a new run.
// Each run is a job of its own here, keyed by its id and, from the second
// run on, "#" and the run's number: the deletion is the old run's last
// event, and every event after it is the new run's.
type trace struct {
	jobs   map[string][]Event                // the case's events by run key, in order
	order  []string                          // run keys in order of first event
	grants map[string]map[election.Token]int // election key -> token -> seq of its grant
	// grantList is every grant, by election key, in order.
	grantList map[string][]Event
	// ends are the runner's own ends of leaderships (revoke, expire),
	// reports the store's reports of ended leaderships to their holders
	// (reported-revoked, watch-snapshot), and pauses the runner's pauses
	// and resumptions of server processes, each in order.
	ends, reports, pauses []Event
	// campaigns are the store's campaign events (Detail: the session).
	campaigns []Event
	// sessions ties peers and sessions into processes: a peer or a
	// session (prefixed "s:") to its representative.
	sessions map[string]string
}

// runJob returns the job id of a run key.
func runJob(key string) string {
	id, _, _ := strings.Cut(key, "#")
	return id
}

func newTrace(all []Event, from int, ids string) *trace {
	tr := &trace{jobs: map[string][]Event{}, grants: map[string]map[election.Token]int{}, grantList: map[string][]Event{}, sessions: map[string]string{}}
	runs := map[string]int{} // job id -> its current run's number, from 1
	for _, e := range all {
		switch {
		case e.Op == "granted" && e.Err == nil && e.Source == "store":
			if tr.grants[e.Key] == nil {
				tr.grants[e.Key] = map[election.Token]int{}
			}
			if _, seen := tr.grants[e.Key][e.Token]; !seen {
				tr.grants[e.Key][e.Token] = e.Seq
				tr.grantList[e.Key] = append(tr.grantList[e.Key], e)
			}
		case e.Source == "client" && (e.Op == "revoke" || e.Op == "expire"):
			tr.ends = append(tr.ends, e)
		case e.Source == "client" && (e.Op == "pause" || e.Op == "resume"):
			tr.pauses = append(tr.pauses, e)
		case e.Op == "reported-revoked" || e.Op == "watch-snapshot":
			tr.reports = append(tr.reports, e)
		case e.Op == "campaign" && e.Source == "store":
			tr.campaigns = append(tr.campaigns, e)
		case e.Op == "session-peer":
			tr.union(e.Peer, "s:"+e.Key)
		}
		if e.Seq < from || !strings.HasPrefix(e.Key, ids) {
			continue
		}
		key := e.Key
		if n := runs[e.Key]; n > 1 {
			key = fmt.Sprintf("%s#%d", e.Key, n)
		}
		if tr.jobs[key] == nil {
			tr.order = append(tr.order, key)
		}
		tr.jobs[key] = append(tr.jobs[key], e)
		if e.Source == "store" && e.Op == "delete-result" && e.Applied {
			runs[e.Key] = max(runs[e.Key], 1) + 1
		}
	}
	return tr
}

// granted reports whether token was granted in the election keyed key
// (a job id, or "jobmanager") before seq.
func (tr *trace) granted(key string, tk election.Token, seq int) bool {
	at, ok := tr.grants[key][tk]
	return ok && at < seq
}

func (tr *trace) find(x string) string {
	for {
		p, ok := tr.sessions[x]
		if !ok || p == x {
			return x
		}
		x = p
	}
}

func (tr *trace) union(a, b string) {
	if tr.sessions == nil {
		tr.sessions = map[string]string{}
	}
	ra, rb := tr.find(a), tr.find(b)
	tr.sessions[ra] = ra
	tr.sessions[rb] = ra
}

// sameProcess reports whether the store call from peer came from the
// process that owns session, and whether that is known: a peer is known
// once a session call came from it (its process owns that session); the
// sessions used from one peer, or one session from several peers, are
// one process's.
func (tr *trace) sameProcess(peer, session string) (same, known bool) {
	if _, ok := tr.sessions[peer]; !ok || peer == "" {
		return false, false
	}
	return tr.find(peer) == tr.find("s:"+session), true
}

// everLed reports whether a session of the process that peer belongs to
// was granted a leadership, in any election, before seq.
func (tr *trace) everLed(peer string, seq int) bool {
	proc := tr.find(peer)
	for _, grants := range tr.grantList {
		for _, g := range grants {
			if g.Seq < seq && tr.find("s:"+g.Token.SessionID) == proc {
				return true
			}
		}
	}
	return false
}

// inflight is how long a deployment or slot request may take to reach a
// TaskExecutor after its JobMaster's leadership ended for it: the time
// to notice a store's report and a message on its way over loopback.
const inflight = 3 * time.Second

// endedFor returns, for a deployment or slot request e under token tk
// of job id, the event from which its JobMaster knew its leadership had
// ended, if one came more than the in-flight window before e. The
// holder's own campaign in the job's election, after the grant, shows
// it knew at once (no window). The contract's rules (see
// jobplane.v1.FencingToken) give two more such events:
//
//   - the store reported the end to the holder: a `revoked` event for the
//     token on its session's WatchSession stream, or a snapshot on that
//     stream that lacks the token (whatever ended it: a revocation, an
//     expired session);
//   - a newer grant of the job's election, when the runner did not end
//     the leadership itself: the store grants anew only after the
//     former leader's own lease has run out (rules 1 and 2), so it had
//     stopped acting by then. A leadership the runner revoked, or whose
//     session it expired, ends for its holder only with the store's
//     report, as the store ended it before its lease ran out.
//
// A server process paused over the event is taken to know of it only
// once it resumed: a call it was sending when it stopped may arrive
// after.
func (tr *trace) endedFor(id string, tk election.Token, e Event) (Event, bool) {
	granted := tr.grants[id][tk]
	var end Event
	found := false
	for _, r := range tr.reports {
		if r.Seq <= granted || r.Seq >= e.Seq {
			continue
		}
		reported := r.Op == "reported-revoked" && r.Key == id && r.Token == tk ||
			r.Op == "watch-snapshot" && r.Key == tk.SessionID && !strings.Contains(" "+r.Detail+" ", " "+election.Job(id)+"="+tk.String()+" ")
		if reported {
			end, found = r, true
			break
		}
	}
	operator := false
	for _, x := range tr.ends {
		if x.Seq > granted && x.Seq < e.Seq && (x.Op == "revoke" && x.Key == id && x.Token == tk || x.Op == "expire" && x.Token.SessionID == tk.SessionID) {
			operator = true
			break
		}
	}
	if !operator {
		for _, g := range tr.grantList[id] {
			if g.Seq > granted && g.Seq < e.Seq && g.Token.Epoch > tk.Epoch && (!found || g.Seq < end.Seq) {
				end, found = g, true
				break
			}
		}
	}
	// The holder's own campaign in the job's election after the grant:
	// it had taken the leadership for ended when it campaigned, so
	// anything it sends under the token after that is late, with no
	// window (as fencing/no-deploy-after-revoke checks).
	for _, c := range tr.campaigns {
		if c.Key == id && c.Detail == "session="+tk.SessionID && c.Seq > granted && c.Seq < e.Seq {
			return c, true
		}
	}
	if !found {
		return Event{}, false
	}
	known := end.Time
	for i, p := range tr.pauses {
		if p.Op != "pause" || p.Seq > end.Seq {
			continue
		}
		for _, q := range tr.pauses[i+1:] {
			if q.Op == "resume" && q.Key == p.Key {
				if q.Seq > end.Seq && q.Time.After(known) {
					known = q.Time
				}
				break
			}
		}
	}
	if e.Time.Sub(known) <= inflight {
		return Event{}, false
	}
	return end, true
}

// checkInvariants checks the case's events, from seq from on, of the
// jobs whose ids start with ids.
func checkInvariants(log *Log, from int, ids string) []string {
	tr := newTrace(log.Events(nil), from, ids)
	var out []string
	for _, inv := range invariants {
		for _, msg := range inv.check(tr) {
			out = append(out, fmt.Sprintf("invariant %s: %s", inv.name, msg))
		}
	}
	return out
}

func isWrite(op string) bool {
	switch op {
	case "put-plan", "delete-plan", "request-cancel", "create-dirty", "mark-clean", "delete-result":
		return true
	}
	return false
}

// firstApplied returns the seq of the job's first applied op, or -1.
func firstApplied(evs []Event, op string) int {
	for _, e := range evs {
		if e.Op == op && e.Applied {
			return e.Seq
		}
	}
	return -1
}

func persistBeforeAck(tr *trace) []string {
	var out []string
	for _, id := range tr.order {
		put := firstApplied(tr.jobs[id], "put-plan")
		for _, e := range tr.jobs[id] {
			if e.Op == "ack" && e.Err == nil && (put < 0 || e.Seq < put) {
				out = append(out, fmt.Sprintf("%v before any plan put of the job took effect; expected the plan durable before SubmitJob answers", e))
				break
			}
		}
	}
	return out
}

func persistBeforeRun(tr *trace) []string {
	var out []string
	for _, id := range tr.order {
		put := firstApplied(tr.jobs[id], "put-plan")
		for _, e := range tr.jobs[id] {
			running := e.Op == "campaign" || e.Op == "confirm" && e.Err == nil || e.Op == "granted" && e.Err == nil && e.Detail != "" ||
				e.Op == "RequestSlot" || e.Op == "SubmitTask"
			if running && (put < 0 || e.Seq < put) {
				out = append(out, fmt.Sprintf("%v before any plan put of the job took effect; expected no campaign, published JobMaster address, slot request or deployment before the plan is durable", e))
				break
			}
		}
	}
	return out
}

func createdOnce(tr *trace) []string {
	var out []string
	for _, id := range tr.order {
		var created []Event
		for _, e := range tr.jobs[id] {
			if e.Op == "ack" && e.Err == nil && strings.HasPrefix(e.Detail, "created=true") {
				created = append(created, e)
			}
		}
		if len(created) > 1 {
			out = append(out, fmt.Sprintf("%v and %v: two answers created=true for one job; expected exactly one submission to create it", created[0], created[1]))
		}
	}
	return out
}

// writesByTheLeader: every write the server attempted (applied or
// refused) carries a token the `jobmanager` election granted, and every
// confirm or resignation one granted in its own election; and each was
// sent by the process that holds that token. The runner's store refuses
// stale tokens, so an applied write always carries the current one: what
// this checks is who sends. The store knows which peer (connection) a call
// came from, and which sessions each peer used (session-peer events); a
// write from a process that never led, carrying a token of another
// process's session (a standby that copied the leader's token), breaks
// it, whatever the store answered. A write from a peer that made no
// session call is not judged, nor one from a process that led: a client
// that spreads its calls over several connections (HTTP/1.1) and holds
// several sessions could show as two processes.
func writesByTheLeader(tr *trace) []string {
	var out []string
	for _, id := range tr.order {
		for _, e := range tr.jobs[id] {
			if e.Source != "store" {
				continue
			}
			write, lead := isWrite(e.Op), e.Op == "confirm" || e.Op == "resign"
			switch {
			case write && !tr.granted(election.JobManager, e.Token, e.Seq):
				out = append(out, fmt.Sprintf("%v carries no token the %s election granted; expected plans, results and cancel requests written only by the leading Dispatcher", e, election.JobManager))
			case lead && !tr.granted(runJob(id), e.Token, e.Seq):
				out = append(out, fmt.Sprintf("%v carries no token granted for job/%s; expected a leadership confirmed or given up only by its holder", e, id))
			case write || lead:
				if same, known := tr.sameProcess(e.Peer, e.Token.SessionID); known && !same && !tr.everLed(e.Peer, e.Seq) {
					out = append(out, fmt.Sprintf("%v sent from %s, a process that does not own session %s and never led; expected every write and leadership call sent only by the holder of its token", e, e.Peer, e.Token.SessionID))
				}
			}
		}
	}
	return out
}

// deployUnderGrantedTokens: every deployment and slot request carries a
// token granted for the job before it, that its JobMaster could still
// hold when it sent it (see endedFor); no deployment carries an older
// token than one already deployed with, nor one the server gave up.
func deployUnderGrantedTokens(tr *trace) []string {
	var out []string
	for _, id := range tr.order {
		var latest election.Token // of the job's deployments so far
		resigned := map[election.Token]int{}
		for _, e := range tr.jobs[id] {
			if e.Op == "resign" && e.Applied {
				resigned[e.Token] = e.Seq
			}
			if e.Op != "SubmitTask" && e.Op != "RequestSlot" {
				continue
			}
			end, ended := Event{}, false
			if tr.granted(runJob(id), e.Token, e.Seq) {
				end, ended = tr.endedFor(runJob(id), e.Token, e)
			}
			switch {
			case !tr.granted(runJob(id), e.Token, e.Seq):
				out = append(out, fmt.Sprintf("%v carries no token granted for job/%s before it; expected deployments and slot requests under the job's JobMaster token", e, id))
			case e.Op == "SubmitTask" && e.Token.Epoch < latest.Epoch:
				out = append(out, fmt.Sprintf("%v after a deployment under the newer token %s; expected no deployment under an older token than one already used", e, latest))
			case e.Op == "SubmitTask" && resigned[e.Token] > 0:
				out = append(out, fmt.Sprintf("%v after the leadership of that token was given up (#%d); expected nothing deployed under it", e, resigned[e.Token]))
			case ended:
				out = append(out, fmt.Sprintf("%v %.1fs after %v; expected nothing sent under a token once its leadership has ended for its holder: at once after the holder campaigns again for the job, and beyond %v in flight after a newer grant or the store's report of the end", e, e.Time.Sub(end.Time).Seconds(), end, inflight))
			}
			if e.Op == "SubmitTask" && e.Token.Epoch > latest.Epoch {
				latest = e.Token
			}
		}
	}
	return out
}

func cleanupOrder(tr *trace) []string {
	var out []string
	for _, id := range tr.order {
		evs := tr.jobs[id]
		dirty, del := firstApplied(evs, "create-dirty"), firstApplied(evs, "delete-plan")
		for _, e := range evs {
			switch {
			case e.Op == "delete-plan" && e.Applied && (dirty < 0 || dirty > e.Seq):
				out = append(out, fmt.Sprintf("%v before the job's result was written; expected the dirty result first", e))
			case e.Op == "mark-clean" && e.Applied && (del < 0 || del > e.Seq):
				out = append(out, fmt.Sprintf("%v before the job's plan was deleted; expected a result marked clean only after its plan delete succeeded", e))
			}
		}
	}
	return out
}

func nothingRunsAfterTheResult(tr *trace) []string {
	var out []string
	for _, id := range tr.order {
		evs := tr.jobs[id]
		dirty := firstApplied(evs, "create-dirty")
		if dirty < 0 {
			continue
		}
		for _, e := range evs {
			// A slot request may still be on its way when the job ends;
			// a campaign or a deployment may not.
			if e.Seq > dirty && (e.Op == "campaign" || e.Op == "SubmitTask") {
				out = append(out, fmt.Sprintf("%v after the job's result was written (#%d); expected a job with a result never to run again", e, dirty))
				break
			}
		}
	}
	return out
}

func acknowledgedJobsStayKnown(tr *trace) []string {
	var out []string
	for _, id := range tr.order {
		acked, forgotten := -1, false
		for _, e := range tr.jobs[id] {
			switch {
			case e.Op == "ack" && e.Err == nil && acked < 0:
				acked = e.Seq
			case e.Op == "delete-result" && e.Applied:
				forgotten = true
			case acked >= 0 && e.Sent > acked && !forgotten && e.Source == "client" && reason(e.Err) == "JOB_NOT_FOUND" && !otherRun(e.Err):
				// Sent after the acknowledgement arrived: one sent before
				// may have been answered from the state before.
				out = append(out, fmt.Sprintf("%v after the job was acknowledged (#%d); expected an acknowledged job known from then on, also across restarts and failovers", e, acked))
			}
		}
	}
	return out
}

// otherRun reports whether err is a JOB_NOT_FOUND that answers a request
// naming a run other than the id's current one (its metadata names the
// run): the job is known, as another run.
func otherRun(err error) bool {
	info, _ := errorDetail[*errdetails.ErrorInfo](err)
	return info.GetMetadata()["run_id"] != ""
}

// seen is what a client's answer said of a job's status: a status
// (the answer's, or one an error's metadata names), that the job is
// globally terminal without saying which status (ALREADY_EXISTS with
// globally_terminated=true), or that it is not (JOB_NOT_TERMINAL,
// ALREADY_EXISTS with globally_terminated=false).
type seen struct {
	status      jobplanev1.JobStatus // UNSPECIFIED: not said
	terminal    bool                 // globally terminal
	notTerminal bool                 // not globally terminal
}

// seenIn returns what a client event says of its job's status, and false
// if it says nothing.
func seenIn(e Event) (seen, bool) {
	if e.Source != "client" {
		return seen{}, false
	}
	if e.Err == nil {
		if e.Status == jobplanev1.JobStatus_JOB_STATUS_UNSPECIFIED {
			return seen{}, false
		}
		return seen{status: e.Status, terminal: terminalStatus(e.Status), notTerminal: !terminalStatus(e.Status)}, true
	}
	info, _ := errorDetail[*errdetails.ErrorInfo](e.Err)
	md := info.GetMetadata()
	switch info.GetReason() {
	case "JOB_TERMINAL", "JOB_NOT_TERMINAL":
		st := jobplanev1.JobStatus(jobplanev1.JobStatus_value[md["status"]])
		if st == jobplanev1.JobStatus_JOB_STATUS_UNSPECIFIED {
			// JOB_TERMINAL without a status may be a job still ending
			// (TriggerSavepoint's answer): it says nothing for sure.
			return seen{notTerminal: true}, info.GetReason() == "JOB_NOT_TERMINAL"
		}
		return seen{status: st, terminal: terminalStatus(st), notTerminal: !terminalStatus(st)}, true
	case "JOB_ALREADY_EXISTS":
		if md["other_principal"] == "true" {
			return seen{}, false // nothing else of the job is told
		}
		if g, err := strconv.ParseBool(md["globally_terminated"]); err == nil {
			return seen{terminal: g, notTerminal: !g}, true
		}
	}
	return seen{}, false
}

func (s seen) String() string {
	switch {
	case s.status != jobplanev1.JobStatus_JOB_STATUS_UNSPECIFIED:
		return strings.TrimPrefix(s.status.String(), "JOB_STATUS_")
	case s.terminal:
		return "globally terminal"
	}
	return "not globally terminal"
}

// terminalIsFinal: once an answer showed a job globally terminal (a
// terminal status, in the answer or in an error's metadata, or
// globally_terminated=true), no answer shows another terminal status, and
// no call sent after that answer arrived shows it otherwise (one sent
// before may have been answered from the state before).
func terminalIsFinal(tr *trace) []string {
	var out []string
	for _, id := range tr.order {
		var final jobplanev1.JobStatus // once known
		var at Event                   // the first answer that showed it terminal
		ended := false
		for _, e := range tr.jobs[id] {
			s, ok := seenIn(e)
			if !ok {
				continue
			}
			switch {
			case !ended:
				if s.terminal {
					ended, at, final = true, e, s.status
				}
			case s.terminal && s.status != jobplanev1.JobStatus_JOB_STATUS_UNSPECIFIED && final != jobplanev1.JobStatus_JOB_STATUS_UNSPECIFIED && s.status != final:
				out = append(out, fmt.Sprintf("%v (%v) after %v; expected a job to end with one terminal status", e, s, at))
			case s.terminal:
				if final == jobplanev1.JobStatus_JOB_STATUS_UNSPECIFIED {
					final = s.status
				}
			case e.Sent > at.Seq:
				out = append(out, fmt.Sprintf("%v (%v) after %v; expected a terminal status never to change", e, s, at))
			}
		}
	}
	return out
}

func terminalStatus(s jobplanev1.JobStatus) bool {
	switch s {
	case jobplanev1.JobStatus_JOB_STATUS_FINISHED, jobplanev1.JobStatus_JOB_STATUS_FAILED, jobplanev1.JobStatus_JOB_STATUS_CANCELED:
		return true
	}
	return false
}

// terminalAfterTheResult: a client sees a job globally terminal (in an
// answer or an error's metadata) only once the job's result is durable
// (its dirty result write took effect).
func terminalAfterTheResult(tr *trace) []string {
	var out []string
	for _, id := range tr.order {
		evs := tr.jobs[id]
		dirty := firstApplied(evs, "create-dirty")
		for _, e := range evs {
			if s, ok := seenIn(e); ok && s.terminal && (dirty < 0 || e.Seq < dirty) {
				out = append(out, fmt.Sprintf("%v (%v) before the job's result was written; expected a globally terminal status shown only once the job has a durable result", e, s))
				break
			}
		}
	}
	return out
}

// oneAttemptAtATime: no subtask runs twice at once. The runner's
// TaskExecutors log each attempt's start and stop as they see them (the
// stop once the attempt's function has returned, before its slot can take
// another); a start of a subtask while another start of it, on any
// TaskExecutor, has no stop yet is two attempts running at once, whatever
// tokens they ran under.
func oneAttemptAtATime(tr *trace) []string {
	var out []string
	for _, id := range tr.order {
		running := map[string]Event{} // subtask -> its running attempt's start
		for _, e := range tr.jobs[id] {
			if e.Op != "attempt-start" && e.Op != "attempt-stop" {
				continue
			}
			subtask, _, _ := strings.Cut(e.Attempt, "#")
			start, ok := running[subtask]
			switch {
			case e.Op == "attempt-stop":
				if ok && start.Source == e.Source && start.Attempt == e.Attempt {
					delete(running, subtask)
				}
			case ok:
				out = append(out, fmt.Sprintf("job %s: subtask %s started again (%s) while it ran (%s); expected each attempt to stop before another of the subtask starts", id, subtask, e, start))
			default:
				running[subtask] = e
			}
		}
	}
	return out
}

package runner

import (
	"fmt"
	"strings"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
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

// trace is what the invariants check: the case's events, by job, and the
// grants of the whole log (a grant may predate the case on a shared
// store).
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
}

// runJob returns the job id of a run key.
func runJob(key string) string {
	id, _, _ := strings.Cut(key, "#")
	return id
}

func newTrace(all []Event, from int, ids string) *trace {
	tr := &trace{jobs: map[string][]Event{}, grants: map[string]map[election.Token]int{}}
	runs := map[string]int{} // job id -> its current run's number, from 1
	for _, e := range all {
		if e.Op == "granted" && e.Err == nil {
			if tr.grants[e.Key] == nil {
				tr.grants[e.Key] = map[election.Token]int{}
			}
			if _, seen := tr.grants[e.Key][e.Token]; !seen {
				tr.grants[e.Key][e.Token] = e.Seq
			}
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

func writesByTheLeader(tr *trace) []string {
	var out []string
	for _, id := range tr.order {
		for _, e := range tr.jobs[id] {
			if e.Source != "store" {
				continue
			}
			switch {
			case isWrite(e.Op) && !tr.granted(election.JobManager, e.Token, e.Seq):
				out = append(out, fmt.Sprintf("%v carries no token the %s election granted; expected plans, results and cancel requests written only by the leading Dispatcher", e, election.JobManager))
			case (e.Op == "confirm" || e.Op == "resign") && !tr.granted(runJob(id), e.Token, e.Seq):
				out = append(out, fmt.Sprintf("%v carries no token granted for job/%s; expected a leadership confirmed or given up only by its holder", e, id))
			}
		}
	}
	return out
}

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
			switch {
			case !tr.granted(runJob(id), e.Token, e.Seq):
				out = append(out, fmt.Sprintf("%v carries no token granted for job/%s before it; expected deployments and slot requests under the job's JobMaster token", e, id))
			case e.Op == "SubmitTask" && e.Token.Epoch < latest.Epoch:
				out = append(out, fmt.Sprintf("%v after a deployment under the newer token %s; expected no deployment under an older token than one already used", e, latest))
			case e.Op == "SubmitTask" && resigned[e.Token] > 0:
				out = append(out, fmt.Sprintf("%v after the leadership of that token was given up (#%d); expected nothing deployed under it", e, resigned[e.Token]))
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
			case acked >= 0 && !forgotten && e.Source == "client" && reason(e.Err) == "JOB_NOT_FOUND" && !otherRun(e.Err):
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

func terminalIsFinal(tr *trace) []string {
	var out []string
	for _, id := range tr.order {
		var final jobplanev1.JobStatus
		var at Event
		for _, e := range tr.jobs[id] {
			if e.Source != "client" || e.Err != nil || e.Status == jobplanev1.JobStatus_JOB_STATUS_UNSPECIFIED {
				continue
			}
			switch {
			case final == jobplanev1.JobStatus_JOB_STATUS_UNSPECIFIED:
				if terminalStatus(e.Status) {
					final, at = e.Status, e
				}
			case e.Status == final:
			case terminalStatus(e.Status) || e.Sent > at.Seq:
				// Another terminal status, or a call sent after the
				// terminal answer arrived (one sent before may have been
				// answered from the state before).
				out = append(out, fmt.Sprintf("%v after %v; expected a terminal status never to change", e, at))
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

// terminalAfterTheResult: a client sees a job globally terminal only once
// the job's result is durable (its dirty result write took effect).
func terminalAfterTheResult(tr *trace) []string {
	var out []string
	for _, id := range tr.order {
		evs := tr.jobs[id]
		dirty := firstApplied(evs, "create-dirty")
		for _, e := range evs {
			if e.Source == "client" && e.Err == nil && terminalStatus(e.Status) && (dirty < 0 || e.Seq < dirty) {
				out = append(out, fmt.Sprintf("%v before the job's result was written; expected a globally terminal status shown only once the job has a durable result", e))
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

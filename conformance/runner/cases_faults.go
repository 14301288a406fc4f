package runner

import (
	"fmt"
	"sync"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/server/hastore"
)

// storeFault is a kind of fault the runner's store injects into a call.
type storeFault struct {
	name string
	f    fault
}

var storeFaults = []storeFault{
	{"fail", fault{before: hastore.ErrUnavailable}},
	{"delay", fault{delay: 300 * time.Millisecond}},
	{"lose-answer", fault{after: hastore.ErrUnavailable}},
	{"held-then-lands", fault{giveUp: true}},
	{"held-then-fails", fault{giveUp: true, before: hastore.ErrUnavailable}},
}

// faultCases are the family "every store call the server makes × every
// fault": a job's calls (its plan put, campaign, cancel request, result,
// plan delete, clean mark and resignation) under each fault on a job of
// its own, the reads of recovery under each fault in a restart, and the
// session's keep-alive. The invariants must hold on the trace, and every
// job must end as it would have without the fault, and be cleaned up.
func faultCases() []Case {
	var out []Case
	for _, op := range []string{"put-plan", "campaign", "request-cancel", "create-dirty", "delete-plan", "mark-clean", "resign"} {
		doc := fmt.Sprintf("each fault (fail, delay, lose the answer, hold until the server gives up and then land or fail) on a job's %s: the job ends as it would have, once, and is cleaned up", op)
		if op == "create-dirty" {
			doc += "; statuses are asked while the result is written, and a cancel once it landed: answered JOB_TERMINAL, after which no answer shows the job running"
		}
		out = append(out, Case{Name: "faults/" + op, Requires: []string{FeatureResourceManager},
			Doc: doc,
			Run: func(t *T) { jobCallFaults(t, op) }})
	}
	for _, sf := range storeFaults {
		if sf.f.after != nil || sf.f.giveUp && sf.f.before == nil {
			continue // a read that lands, its answer lost, is a read that failed
		}
		out = append(out, Case{Name: "faults/recovery-reads-" + sf.name, Requires: []string{FeatureResourceManager, featureRunnerStarts},
			Doc: fmt.Sprintf("%s on each read of recovery (list and get plans and results) while a restarted server recovers: the running job is never JOB_NOT_FOUND meanwhile, no acknowledged job is lost or answered unknown, the running job is recovered, the finished one stays finished", sf.name),
			Run: func(t *T) { recoveryReadFaults(t, sf) }})
	}
	out = append(out, Case{Name: "faults/session-calls", Requires: []string{FeatureResourceManager, featureRunnerStarts},
		Doc: "a restart with repeated faults on the store calls of sessions and leadership (OpenSession, Campaign and ConfirmLeadership of `jobmanager`, GetLeader, KeepAlive, Withdraw: failed, or applied with the answer lost, on several calls each, of those the server makes; and the running job's result read and resignation failed once): the restarted server opens a session, leads, recovers the running job under a new token and finishes it, and runs a job submitted after",
		Run: sessionCallFaults})
	out = append(out, Case{Name: "faults/random-schedule", Requires: []string{FeatureResourceManager},
		Doc: fmt.Sprintf("%d clients submit, cancel and observe jobs (%d operations each) while every store call and stream the server makes fails, is delayed or loses its answer on a random schedule (--seed; probability %.2f, at most %d faults); then every job is driven to its end, and the history judged: porcupine's check (no acknowledged job lost, one terminal status, an acknowledged cancel ends CANCELED, one created=true), one result status per job, nothing run after the result", randomClients, randomOpsPerClient, randomP, randomBudget),
		Run: randomSchedule})
	out = append(out, Case{Name: "faults/keep-alive", Requires: []string{FeatureResourceManager},
		Doc: "each fault on the session's keep-alive: the server keeps or regains its leaderships, the running job finishes, nothing runs twice at once",
		Run: keepAliveFaults})
	return out
}

// submitRetrying submits as a client with retries would: an error is
// asked again, the same plan under the same id, for up to the failover
// wait (a leader that has not read the store's jobs yet MAY answer
// NOT_LEADER, and its recovery's reads may be what the fault holds).
func (t *T) submitRetrying(id string, g *jobplanev1.JobGraph) {
	var err error
	for deadline := time.Now().Add(t.waits.failover); time.Now().Before(deadline); {
		if _, err = t.submit(id, g); err == nil {
			return
		}
		if timedOut(err) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("SubmitJob(%s) with retries: %v; expected it accepted once the fault passed", id, err)
}

// cancelRetrying cancels as a client with retries would, for up to the
// failover wait.
func (t *T) cancelRetrying(id string) {
	var err error
	for deadline := time.Now().Add(t.waits.failover); time.Now().Before(deadline); {
		if _, err = t.dispatcher().CancelJob(t.ctx, &jobplanev1.CancelJobRequest{JobId: id}); err == nil {
			return
		}
		if timedOut(err) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("CancelJob(%s) with retries: %v; expected it taken once the fault passed", id, err)
}

// neverNotFound asks GetJob of a persisted job, as a client with retries
// would, until the server answers for it: every refusal is asked again,
// except JOB_NOT_FOUND, which is an error.
func (t *T) neverNotFound(id, what string) {
	var err error
	for range 500 {
		if _, err = t.dispatcher().GetJob(t.ctx, &jobplanev1.GetJobRequest{JobId: id}); err == nil {
			return
		}
		if notFound(err) {
			t.Errorf("%s: GetJob(%s) = %v; expected the persisted job, once the server answers for it (a recovering server waits, or refuses as not the leader)", what, id, err)
			return
		}
		if timedOut(err) {
			break
		}
		time.Sleep(20 * time.Millisecond) // soon: a server may read the plans in a few hundred ms
	}
	t.Fatalf("%s: GetJob(%s) with retries: %v; expected the job once the fault passed", what, id, err)
}

// endsCleanly waits for the job's result, checks its status, and waits
// for its cleanup (its result marked clean).
func (t *T) endsCleanly(id string, want jobplanev1.JobStatus, what string) {
	if r := t.result(id); r.GetStatus() != want {
		t.Errorf("%s: job %s ended %v (%s); expected %v", what, id, r.GetStatus(), r.GetFailure().GetMessage(), want)
		return
	}
	if !t.wait(t.waits.cleanup, func() bool { return firstApplied(t.events(id, "mark-clean"), "mark-clean") >= 0 }) {
		t.Errorf("%s: job %s's result was not marked clean within %v of its end; expected the cleanup to finish despite the fault", what, id, t.waits.cleanup)
	}
}

func jobCallFaults(t *T, op string) {
	var wg sync.WaitGroup
	for _, sf := range storeFaults {
		id := t.job(sf.name)
		f := sf.f
		f.op, f.key = op, id
		if f.giveUp && op != "put-plan" {
			// Held until the server gives up, or 3s: the suite does not
			// wait out every timeout a server may choose. A plan put is
			// held until the server gives up, for the outcome it then
			// does not know.
			f.upTo = 3 * time.Second
		}
		if op == "campaign" {
			// A candidacy campaigns on in the store, not on the
			// server's call: its answer is lost on the way back, and a
			// hold lasts two seconds.
			if f.after != nil {
				f.op = "campaign-answer"
			}
			if f.giveUp {
				f.giveUp, f.delay = false, 2*time.Second
			}
		}
		t.env.store.arm(f)
		wg.Add(1)
		go func() {
			defer wg.Done()
			what := fmt.Sprintf("%s on %s", sf.name, op)
			if op == "request-cancel" {
				t.submitRetrying(id, gatedGraph(1, "never"))
				t.cancelRetrying(id)
				t.endsCleanly(id, jobplanev1.JobStatus_JOB_STATUS_CANCELED, what)
				return
			}
			t.submitRetrying(id, blockingGraph(2))
			if op == "create-dirty" {
				// Asked while the result is being written: the
				// invariants judge every status answered. Once the
				// write landed, a cancel too: the store refuses it,
				// the result came first, and it must be answered
				// JOB_TERMINAL (FINISHED), so no later status may show
				// the job running (terminal-is-final), also while the
				// server, its answer lost or held, writes again.
				done := make(chan struct{})
				defer close(done)
				go func() {
					for {
						select {
						case <-done:
							return
						case <-time.After(50 * time.Millisecond):
							if firstApplied(t.events(id, "create-dirty"), "create-dirty") >= 0 {
								_, _ = t.dispatcher().CancelJob(t.ctx, &jobplanev1.CancelJobRequest{JobId: id})
							}
							t.status(id)
						}
					}
				}()
			}
			t.endsCleanly(id, jobplanev1.JobStatus_JOB_STATUS_FINISHED, what)
			t.deployedOnce(id, 4)
		}()
	}
	wg.Wait()
}

// recoveryReadFaults restarts the server, with a job running and one
// finished, and the fault armed on each read of recovery, and checks what
// it recovers.
func recoveryReadFaults(t *T, sf storeFault) {
	running, finished, other := t.job("running"), t.job("finished"), t.job("other")
	t.setup(func() {
		t.mustSubmit(running, gatedGraph(1, running))
		t.mustSubmit(other, gatedGraph(1, other))
		t.mustSubmit(finished, noopGraph(1))
		t.endsCleanly(finished, jobplanev1.JobStatus_JOB_STATUS_FINISHED, "before the restart")
		t.waitRunning(running, 1)
	})
	old := t.leaderOf(election.Job(running)).Token
	for _, op := range []string{"list-plans", "get-plan", "list-results", "get-result"} {
		f := sf.f
		f.op, f.upTo = op, 3*time.Second
		t.env.store.arm(f)
	}
	leader, _ := t.leaderProc()
	t.killLeader(leader)
	if _, err := t.env.startServer(0); err != nil {
		t.Fatalf("restart: %v", err)
	}
	what := sf.name + " on the reads of recovery"
	// Asked while the restarted server recovers, beside the submissions
	// below (a server may take them before it has read every plan): a
	// persisted job is never NOT_FOUND; a server answers for it once it
	// has read it.
	asked := make(chan struct{})
	go func() {
		defer close(asked)
		t.neverNotFound(other, what)
	}()
	// Asked while the restarted server recovers: never unknown, never
	// created anew, never another status (the invariants check the
	// answers).
	t.submitRetrying(finished, noopGraph(1))
	t.submitRetrying(running, gatedGraph(1, running))
	<-asked
	t.regrant(running, old)
	t.env.open(running)
	t.endsCleanly(running, jobplanev1.JobStatus_JOB_STATUS_FINISHED, what)
	t.env.open(other)
	t.endsCleanly(other, jobplanev1.JobStatus_JOB_STATUS_FINISHED, what)
	if n := len(t.events(finished, "SubmitTask")); n != 1 {
		t.Errorf("%s: the finished job was deployed %d times; expected once, before the restart", what, n)
	}
}

func keepAliveFaults(t *T) {
	for _, sf := range storeFaults {
		id := t.job(sf.name)
		t.setup(func() {
			t.mustSubmit(id, gatedGraph(2, id))
			t.waitRunning(id, 2)
		})
		f := sf.f
		f.op = "keep-alive"
		from := t.env.log.Len()
		t.env.store.arm(f)
		what := sf.name + " on keep-alive"
		// The faulted renewal, then one that succeeds: faults on
		// consecutive renewals could outlast the session's lease, which
		// ends leaderships by design.
		if !t.wait(30*time.Second, func() bool {
			faulted := t.env.log.Events(func(e Event) bool { return e.Seq > from && e.Op == "keep-alive" })
			return len(faulted) > 0 && len(t.env.log.Events(func(e Event) bool {
				return e.Seq > faulted[0].Seq && e.Op == "keep-alive" && e.Err == nil
			})) > 0
		}) {
			t.Fatalf("%s: no renewal that succeeded within 30s of the faulted one; expected the server to renew its session again soon, within its lease", what)
		}
		t.env.open(id)
		t.endsCleanly(id, jobplanev1.JobStatus_JOB_STATUS_FINISHED, what)
	}
	t.barrier()
}

// sessionCallFaults restarts the server with faults armed, by method, on
// the store calls of its session and its leaderships, each on several
// calls in a row or every other call, and checks what it recovers.
func sessionCallFaults(t *T) {
	running := t.job("running")
	t.setup(func() {
		t.mustSubmit(running, gatedGraph(1, running))
		t.waitRunning(running, 1)
	})
	old := t.leaderOf(election.Job(running)).Token
	leader, _ := t.leaderProc()
	t.killLeader(leader)
	fail, lose := hastore.ErrUnavailable, hastore.ErrUnavailable
	for _, f := range []fault{
		{op: "OpenSession", before: fail, times: 2},
		{op: "OpenSession", after: lose}, // a session left to expire
		{op: "Campaign", key: election.JobManager, before: fail, times: 2},
		{op: "Campaign", key: election.JobManager, after: lose},
		{op: "ConfirmLeadership", before: fail, every: 2, times: 3},
		{op: "GetLeader", before: fail, every: 2, times: 3},
		{op: "KeepAlive", after: lose, every: 3, times: 2},
		{op: "Withdraw", before: fail, times: 2},
		// The recovered job's first term cannot read whether the job has
		// a result, and its resignation fails: the server must still
		// lead the job again (a resignation left undone keeps the
		// session's candidacy, and a new campaign of it is refused).
		{op: "get-result", key: running, before: fail},
		{op: "Resign", key: running, before: fail},
	} {
		t.env.store.arm(f)
	}
	if _, err := t.env.startServer(0); err != nil {
		t.Fatalf("restart: %v", err)
	}
	what := "faults on the session and leadership calls of a restart"
	t.regrant(running, old)
	t.env.open(running)
	t.endsCleanly(running, jobplanev1.JobStatus_JOB_STATUS_FINISHED, what)
	after := t.job("after")
	t.submitRetrying(after, noopGraph(1))
	t.endsCleanly(after, jobplanev1.JobStatus_JOB_STATUS_FINISHED, what)
	for _, m := range []string{"OpenSession", "Campaign", "ConfirmLeadership", "GetLeader", "KeepAlive", "Withdraw", "get-result", "Resign"} {
		t.env.store.disarm(m, "")
	}
}

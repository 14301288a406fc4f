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
		out = append(out, Case{Name: "faults/" + op, Requires: []string{FeatureResourceManager},
			Doc: fmt.Sprintf("each fault (fail, delay, lose the answer, hold until the server gives up and then land or fail) on a job's %s: the job ends as it would have, once, and is cleaned up", op),
			Run: func(t *T) { jobCallFaults(t, op) }})
	}
	for _, sf := range storeFaults {
		if sf.f.after != nil || sf.f.giveUp && sf.f.before == nil {
			continue // a read that lands, its answer lost, is a read that failed
		}
		out = append(out, Case{Name: "faults/recovery-reads-" + sf.name, Requires: []string{FeatureResourceManager, featureRunnerStarts},
			Doc: fmt.Sprintf("%s on each read of recovery (list and get plans and results) while a restarted server recovers: no acknowledged job is lost or answered unknown, the running job is recovered, the finished one stays finished", sf.name),
			Run: func(t *T) { recoveryReadFaults(t, sf) }})
	}
	out = append(out, Case{Name: "faults/keep-alive", Requires: []string{FeatureResourceManager},
		Doc: "each fault on the session's keep-alive: the server keeps or regains its leaderships, the running job finishes, nothing runs twice at once",
		Run: keepAliveFaults})
	return out
}

// submitRetrying submits as a client with retries would: an error is
// asked again, the same plan under the same id, up to 20 times.
func (t *T) submitRetrying(id string, g *jobplanev1.JobGraph) {
	var err error
	for range 20 {
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

// cancelRetrying cancels as a client with retries would.
func (t *T) cancelRetrying(id string) {
	var err error
	for range 20 {
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
				// invariants judge every status answered.
				done := make(chan struct{})
				defer close(done)
				go func() {
					for {
						select {
						case <-done:
							return
						case <-time.After(50 * time.Millisecond):
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
	running, finished := t.job("running"), t.job("finished")
	t.setup(func() {
		t.mustSubmit(running, gatedGraph(1, running))
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
	// Asked while the restarted server recovers: never unknown, never
	// created anew, never another status (the invariants check the
	// answers).
	t.submitRetrying(finished, noopGraph(1))
	t.submitRetrying(running, gatedGraph(1, running))
	t.regrant(running, old)
	t.env.open(running)
	t.endsCleanly(running, jobplanev1.JobStatus_JOB_STATUS_FINISHED, what)
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

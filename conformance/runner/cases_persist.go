package runner

import (
	"time"

	"connectrpc.com/connect"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/server/hastore"
)

// putBefore is a case: the job's plan put precedes its first op (as seen
// at the store or the TaskExecutors).
func putBefore(op, what string, needsRM bool) Case {
	c := Case{Name: "persist/plan-before-" + what, Doc: "the plan put completes before the job's first " + op + ", for graphs of every shape", Run: func(t *T) {
		for _, sh := range shapes {
			id := t.job(sh.name)
			t.mustSubmit(id, sh.graph)
			t.wait(30*time.Second, func() bool { return len(t.events(id, op)) > 0 })
			puts := ok(t.events(id, "put-plan"))
			later := t.events(id, op)
			switch {
			case len(puts) == 0:
				t.Errorf("%s graph: no successful plan put for the job; expected one", sh.name)
			case len(later) == 0:
				t.Errorf("%s graph: no %s for the job; expected at least one", sh.name, op)
			case later[0].Seq < puts[0].Seq:
				t.Errorf("%s graph: %v came before the plan put %v; expected the put first", sh.name, later[0], puts[0])
			}
		}
	}}
	if needsRM {
		c.Requires = []string{FeatureResourceManager}
	}
	return c
}

var persistCases = []Case{
	putBefore("campaign", "campaign", false),
	{Name: "persist/plan-before-address", Doc: "the plan put completes before the job's JobMaster address is published (a grant carrying it, or a confirm), if the server publishes one (a job election need not)", Run: func(t *T) {
		id := t.job("j")
		t.mustSubmit(id, noopGraph(2))
		published := func() []Event {
			var out []Event
			for _, e := range t.events(id, "") {
				if e.Err == nil && (e.Op == "confirm" || e.Op == "granted" && e.Detail != "") {
					out = append(out, e)
				}
			}
			return out
		}
		// LeaderInfo.address may stay empty for a job's election: without
		// a publication, the case waits for the job's result, after which
		// nothing of the job runs.
		t.wait(30*time.Second, func() bool { return len(published()) > 0 || len(ok(t.events(id, "create-dirty"))) > 0 })
		puts, later := ok(t.events(id, "put-plan")), published()
		switch {
		case len(puts) == 0:
			t.Errorf("no successful plan put for the job; expected one")
		case len(later) == 0:
			// Nothing published, nothing published too early.
		case later[0].Seq < puts[0].Seq:
			t.Errorf("%v published the address before the plan put %v; expected the put first", later[0], puts[0])
		}
	}},
	putBefore("RequestSlot", "slot-request", true),
	putBefore("SubmitTask", "deploy", true),
	putBefore("ack", "ack", false),
	{Name: "persist/failed-put-no-run", Doc: "a failed plan put is an error, and the job is never campaigned for, given slots or deployed", Run: func(t *T) {
		id := t.job("j")
		t.env.store.arm(fault{op: "put-plan", key: id, before: hastore.ErrUnavailable})
		if _, err := t.submit(id, noopGraph(2)); err == nil {
			t.Errorf("submit with a failed plan put succeeded; expected an error")
		}
		t.barrier()
		for _, op := range []string{"campaign", "confirm", "RequestSlot", "SubmitTask"} {
			if evs := t.events(id, op); len(evs) > 0 {
				t.Errorf("%v after the failed put; expected no %s", evs[0], op)
			}
		}
	}},
	{Name: "persist/delayed-put-holds-ack", Doc: "a slow plan put holds the acknowledgement back until it completed, also the answer to an identical submission that arrives meanwhile", Run: func(t *T) {
		id := t.job("j")
		t.env.store.arm(fault{op: "put-plan", key: id, delay: 800 * time.Millisecond})
		start := time.Now()
		second := make(chan struct{})
		go func() {
			defer close(second)
			time.Sleep(200 * time.Millisecond)
			_, _ = t.submit(id, noopGraph(1)) // the invariants judge its answer
		}()
		t.mustSubmit(id, noopGraph(1))
		<-second
		puts, acks := ok(t.events(id, "put-plan")), ok(t.events(id, "ack"))
		for _, a := range acks {
			if len(puts) == 0 || a.Seq < puts[0].Seq {
				t.Errorf("%v before the plan put completed (puts %v); expected every accepting answer after the put", a, puts)
			}
		}
		if d := time.Since(start); d < 800*time.Millisecond {
			t.Errorf("acknowledged after %v; expected at least the put's 800ms", d)
		}
	}},
	{Name: "persist/dirty-result-before-plan-delete", Doc: "a terminal job's result is written dirty before its plan is deleted", Run: func(t *T) {
		id := t.cleanedUp()
		dirty, del := firstApplied(t.events(id, "create-dirty"), "create-dirty"), t.events(id, "delete-plan")
		switch {
		case len(del) == 0:
			t.Errorf("the job's plan was not deleted within 30s of its end; expected the cleanup to delete it once the result is written")
		case dirty < 0 || del[0].Seq < dirty:
			t.Errorf("%v came before the job's dirty result was written; expected the result first, then the plan delete", del[0])
		}
	}},
	{Name: "persist/clean-after-plan-delete", Doc: "a result is marked clean only after the plan was deleted", Run: func(t *T) {
		id := t.cleanedUp()
		del, clean := firstApplied(t.events(id, "delete-plan"), "delete-plan"), t.events(id, "mark-clean")
		switch {
		case len(clean) == 0:
			t.Errorf("the job's result was not marked clean within 30s of its end; expected the cleanup to finish")
		case del < 0 || clean[0].Seq < del:
			t.Errorf("%v came before the job's plan delete took effect; expected the delete first", clean[0])
		}
	}},
	{Name: "persist/invalid-plan-writes-nothing", Doc: "an invalid JobGraph is INVALID_ARGUMENT and writes nothing", Run: func(t *T) {
		id := t.job("j")
		bad := noopGraph(1)
		bad.Vertices[0].Parallelism = 0
		if _, err := t.submit(id, bad); connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("invalid graph answered %v; expected INVALID_ARGUMENT", err)
		}
		t.barrier()
		if evs := t.env.log.Events(func(e Event) bool { return e.Key == id && e.Source == "store" }); len(evs) > 0 {
			t.Errorf("store calls %v for the invalid job; expected none", evs)
		}
	}},
	{Name: "persist/cancel-not-recorded", Requires: []string{FeatureResourceManager},
		Doc: "a CancelJob whose request the store refused is UNAVAILABLE (CANCEL_NOT_RECORDED) and does nothing: the tasks run on; canceling again cancels", Run: cancelNotRecorded},
	{Name: "persist/unknown-outcome-runs", Requires: []string{FeatureResourceManager},
		Doc: "a plan put applied with its answer lost and the read-back failing: the answer is no PERSIST_FAILED, and the durable plan runs once with no retry by the client", Run: unknownOutcomeRuns},
	{Name: "persist/late-plan-runs", Requires: []string{FeatureResourceManager},
		Doc: "a plan put answered UNAVAILABLE that the store applies only later (half the advertised ServerTimings.plan_recheck, at most 5 s, after the answer), when the server's read-back showed no plan: the job runs once, with no retry by the client", Run: latePlanRuns},
	{Name: "persist/failed-put-unreadable", Doc: "a plan put that failed, with its read-back failing too: SubmitJob is an error and nothing runs", Run: failedPutUnreadable},
	{Name: "persist/plan-digest-canonical", Requires: []string{FeatureResourceManager},
		Doc: "the stored plan and result carry the plan digest the contract defines (SHA-256 of the normalized graph's canonical encoding), as any implementation computes it", Run: planDigestCanonical},
}

// cleanedUp runs a job to its end (canceled) and waits, up to 30s, until
// its result is marked clean; it returns the job id. The cases check what
// came in which order, attempts included.
func (t *T) cleanedUp() string {
	id := t.job("j")
	t.mustSubmit(id, gatedGraph(1, "never"))
	t.cancel(id)
	t.wait(30*time.Second, func() bool { return firstApplied(t.events(id, "mark-clean"), "mark-clean") >= 0 })
	return id
}

// cancelNotRecorded fails the job's cancel request at the store: CancelJob
// must answer CANCEL_NOT_RECORDED and do nothing (the tasks run on); a
// second CancelJob then cancels the job.
func cancelNotRecorded(t *T) {
	id := t.job("j")
	t.setup(func() {
		t.mustSubmit(id, gatedGraph(2, "never"))
		t.waitRunning(id, 2)
	})
	from := t.env.log.Len()
	t.env.store.arm(fault{op: "request-cancel", key: id, before: hastore.ErrUnavailable})
	_, err := t.dispatcher().CancelJob(t.ctx, &jobplanev1.CancelJobRequest{JobId: id})
	if connect.CodeOf(err) != connect.CodeUnavailable || reason(err) != "CANCEL_NOT_RECORDED" {
		t.Errorf("CancelJob whose request the store refused answered %v; expected UNAVAILABLE (CANCEL_NOT_RECORDED): a cancellation is durable before it is answered", err)
	}
	t.barrier()
	for _, e := range t.env.log.Events(nil)[from:] {
		if e.Key == id && e.Op == "CancelTask" {
			t.Errorf("%v after a cancellation that was not recorded; expected nothing done for it", e)
		}
	}
	if st := t.status(id); st != jobplanev1.JobStatus_JOB_STATUS_RUNNING {
		t.Errorf("job %s is %v after a cancellation that was not recorded; expected it RUNNING", id, st)
	}
	t.cancel(id)
	if r := t.result(id); r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_CANCELED {
		t.Errorf("job ended %v after the second CancelJob; expected CANCELED", r.GetStatus())
	}
}

// unknownOutcomeRuns applies the job's plan put but loses its answer, and
// fails the read-back: the server cannot tell, answers an error, and,
// the plan being durable, must run the job once although the client
// never retries.
func unknownOutcomeRuns(t *T) {
	id := t.job("j")
	t.env.store.arm(fault{op: "put-plan", key: id, after: hastore.ErrUnavailable})
	t.env.store.arm(fault{op: "get-plan", key: id, before: hastore.ErrUnavailable})
	_, err := t.submit(id, noopGraph(2))
	switch {
	case err == nil:
		// It found out after all (a second read); the job runs.
	case reason(err) == "PERSIST_FAILED":
		t.Errorf("SubmitJob whose plan the store applied answered %v; expected PERSIST_OUTCOME_UNKNOWN or success: the plan is durable", err)
	}
	if !t.wait(t.waits.unknownOutcome, func() bool { return firstApplied(t.events(id, "create-dirty"), "create-dirty") >= 0 }) {
		t.Errorf("the job whose plan is durable did not run to its end within %v, with no retry by the client; expected it to run once, as if acknowledged (PERSIST_OUTCOME_UNKNOWN)", t.waits.unknownOutcome)
		return
	}
	t.deployedOnce(id, 2)
}

// latePlanRuns fails the job's plan put at once and applies it later:
// the Dispatcher, which answered the submission with an error, must find
// the plan within its advertised plan_recheck and run the job.
func latePlanRuns(t *T) {
	recheck := defaultTimings.GetPlanRecheck().AsDuration()
	if t.timings != nil && t.timings.GetPlanRecheck().AsDuration() > 0 {
		recheck = t.timings.GetPlanRecheck().AsDuration()
	}
	late := min(recheck/2, 5*time.Second)
	id := t.job("j")
	t.env.store.arm(fault{op: "put-plan", key: id, before: hastore.ErrUnavailable, late: late})
	_, _ = t.submit(id, noopGraph(2)) // an error, unless the server put the plan again itself
	if !t.wait(t.waits.unknownOutcome, func() bool { return firstApplied(t.events(id, "create-dirty"), "create-dirty") >= 0 }) {
		t.Errorf("the job whose plan put failed, and which the store applied %v later, did not run to its end within %v, with no retry by the client; expected it to run once: a plan that appears within ServerTimings.plan_recheck (%v) runs (PERSIST_FAILED)", late, t.waits.unknownOutcome, recheck)
		return
	}
	t.deployedOnce(id, 2)
}

// failedPutUnreadable fails the job's plan put and its read-back: the
// server must not take the plan as durable.
func failedPutUnreadable(t *T) {
	id := t.job("j")
	t.env.store.arm(fault{op: "put-plan", key: id, before: hastore.ErrUnavailable})
	t.env.store.arm(fault{op: "get-plan", key: id, before: hastore.ErrUnavailable})
	if resp, err := t.submit(id, noopGraph(2)); err == nil {
		t.Errorf("SubmitJob whose plan put failed, and whose read-back failed too, answered created=%v; expected an error: the plan is not durable", resp.GetCreated())
	}
	t.barrier()
	for _, op := range []string{"campaign", "RequestSlot", "SubmitTask"} {
		if evs := t.events(id, op); len(evs) > 0 {
			t.Errorf("%v for a job whose plan was never stored; expected nothing run", evs[0])
		}
	}
}

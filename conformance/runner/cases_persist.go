package runner

import (
	"time"

	"connectrpc.com/connect"

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
	{Name: "persist/plan-before-address", Doc: "the plan put completes before the job's JobMaster address is published (a grant carrying it, or a confirm)", Run: func(t *T) {
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
		t.wait(30*time.Second, func() bool { return len(published()) > 0 })
		puts, later := ok(t.events(id, "put-plan")), published()
		switch {
		case len(puts) == 0:
			t.Errorf("no successful plan put for the job; expected one")
		case len(later) == 0:
			t.Errorf("the job's JobMaster address was never published (no grant with an address, no confirm); expected one")
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
	{Name: "persist/delayed-put-holds-ack", Doc: "a slow plan put holds the acknowledgement back until it completed", Run: func(t *T) {
		id := t.job("j")
		t.env.store.arm(fault{op: "put-plan", key: id, delay: 800 * time.Millisecond})
		start := time.Now()
		t.mustSubmit(id, noopGraph(1))
		puts, acks := ok(t.events(id, "put-plan")), t.events(id, "ack")
		if len(puts) == 0 || len(acks) == 0 || acks[0].Seq < puts[0].Seq {
			t.Errorf("puts %v, acks %v; expected the ack after the put", puts, acks)
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

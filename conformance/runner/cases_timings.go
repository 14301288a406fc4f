package runner

import (
	"context"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
)

// timingCases check the timings a server advertises (ServerTimings,
// since 1.2), from which the runner takes its waits.
var timingCases = []Case{
	{Name: "lifecycle/advertised-limits",
		Doc: "GetClusterOverview advertises the server's timings (ServerTimings, since 1.2), each within the bounds the contract sets, and the session TTL it advertises bounds the TTL of the HA-store sessions it opens",
		Run: advertisedLimits},
	{Name: "lifecycle/idle-slots-given-back", Requires: []string{FeatureResourceManager},
		Doc: "a job whose one pipelined region needs more slots than the cluster has (2 more) holds every slot idle while it waits; within the advertised ServerTimings.slot_yield (and the runner's slack) of taking the last, it gives idle slots back with FreeSlot(s), still waiting rather than failed",
		Run: idleSlotsGivenBack},
}

// idleSlotsGivenBack submits a job of one region that needs two slots
// more than the runner's TaskExecutors have: it takes them all, deploys
// nothing, and must give them back within the advertised slot_yield, so
// that jobs that each hold part of what they need do not wait for one
// another.
func idleSlotsGivenBack(t *T) {
	total := t.env.cfg.taskExecutors * t.env.cfg.slots
	id := t.job("j")
	t.mustSubmit(id, gatedGraph(int32(total/2+1), id))
	defer t.cancel(id)
	if !t.wait(t.waits.failover, func() bool { return len(ok(t.events(id, "RequestSlot"))) >= total }) {
		t.Fatalf("the job of %d subtasks was allocated %d of the %d slots within %v; expected all of them, its region waiting for more", total+2, len(ok(t.events(id, "RequestSlot"))), total, t.waits.failover)
	}
	if !t.wait(t.waits.slotYield, func() bool { return len(ok(t.events(id, "FreeSlot"))) > 0 }) {
		t.Fatalf("the job held %d idle slots for %v while its region waited for more, and gave none back; expected them given back (FreeSlot) within the advertised ServerTimings.slot_yield", total, t.waits.slotYield)
	}
	switch st := t.status(id); st {
	case jobplanev1.JobStatus_JOB_STATUS_FAILED, jobplanev1.JobStatus_JOB_STATUS_CANCELED, jobplanev1.JobStatus_JOB_STATUS_FINISHED:
		t.Errorf("the job gave its idle slots back as it ended %v; expected it to give them back while it waits, and to wait on", st)
	}
	for _, e := range t.events(id, "SubmitTask") {
		t.Errorf("%v: a subtask of a region that never had all its slots was deployed; expected none", e)
		break
	}
}

func advertisedLimits(t *T) {
	ctx, cancel := context.WithTimeout(t.ctx, 10*time.Second)
	defer cancel()
	resp, err := t.dispatcher().GetClusterOverview(ctx, &jobplanev1.GetClusterOverviewRequest{})
	if err != nil {
		t.Fatalf("GetClusterOverview: %v; expected the leader's overview", err)
	}
	tm := resp.GetTimings()
	if tm == nil {
		t.Fatalf("GetClusterOverview.timings is unset; expected the server's timings (ServerTimings, since 1.2)")
	}
	for _, msg := range outOfBounds(tm) {
		t.Errorf("GetClusterOverview advertises %s", msg)
	}
	// What it advertises holds: no session of it outlives its process by
	// more than the advertised TTL.
	ttl := tm.GetSessionTtl().AsDuration()
	opened := t.env.log.Events(func(e Event) bool { return e.Source == "store" && e.Op == "open-session" })
	if len(opened) == 0 {
		t.Fatalf("setup: no OpenSession recorded; expected the leading server's session")
	}
	for _, e := range opened {
		asked, err := time.ParseDuration(e.Detail)
		if err != nil || asked > ttl {
			t.Errorf("the server opened an HA-store session with a TTL of %s, longer than the ServerTimings.session_ttl it advertises (%v); expected every session's TTL to be at most the advertised one", e.Detail, ttl)
		}
	}
}

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

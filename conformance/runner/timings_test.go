package runner

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
)

// The reference server's timings keep the waits the runner had before
// the server advertised them; longer timings lengthen them, and
// --timing-scale multiplies them.
func TestWaitsFollowTimings(t *testing.T) {
	w := deriveWaits(nil, 1)
	for _, c := range []struct {
		name      string
		got, want time.Duration
	}{
		{"failover", w.failover, 29 * time.Second}, {"result", w.result, 59 * time.Second}, {"revoke", w.revoke, 10 * time.Second},
		{"cancel", w.cancel, 10 * time.Second}, {"pausedLeader", w.pausedLeader, 58 * time.Second}, {"cancelFailover", w.cancelFailover, 87 * time.Second},
		{"redeploy", w.redeploy, 88 * time.Second},
	} {
		if c.got != c.want {
			t.Errorf("%s with the reference timings: %v, want %v", c.name, c.got, c.want)
		}
	}
	if got := deriveWaits(defaultTimings, 1); got != w {
		t.Errorf("waits of the default timings %+v differ from those of none %+v", got, w)
	}
	slow := proto.CloneOf(defaultTimings)
	slow.SessionTtl = durationpb.New(10 * time.Second)
	if got, want := deriveWaits(slow, 1).failover, w.failover+16*time.Second; got != want {
		t.Errorf("failover with a 10s session TTL: %v, want %v", got, want)
	}
	slow.SessionTtl = durationpb.New(time.Hour)
	if got, want := deriveWaits(slow, 1).failover, w.failover+16*time.Second; got != want {
		t.Errorf("failover with a session TTL of an hour, beyond the contract's bound: %v, want %v (as for the bound)", got, want)
	}
	if got, want := deriveWaits(nil, 2.5).result, time.Duration(2.5*float64(w.result)); got != want {
		t.Errorf("result wait at scale 2.5: %v, want %v", got, want)
	}
}

// The reference server's defaults are within the contract's bounds; a
// value outside one is reported naming its field.
func TestTimingBounds(t *testing.T) {
	if got := outOfBounds(defaultTimings); len(got) != 0 {
		t.Errorf("the reference defaults are out of bounds: %v", got)
	}
	for field, mutate := range map[string]func(tm *jobplanev1.ServerTimings){
		"session_ttl":         func(tm *jobplanev1.ServerTimings) { tm.SessionTtl = durationpb.New(11 * time.Second) },
		"takeover":            func(tm *jobplanev1.ServerTimings) { tm.Takeover = nil },
		"job_regrant":         func(tm *jobplanev1.ServerTimings) { tm.JobRegrant = durationpb.New(0) },
		"revocation_notice":   func(tm *jobplanev1.ServerTimings) { tm.RevocationNotice = durationpb.New(time.Minute) },
		"task_cancel":         func(tm *jobplanev1.ServerTimings) { tm.TaskCancel = durationpb.New(-time.Second) },
		"slot_yield":          func(tm *jobplanev1.ServerTimings) { tm.SlotYield = durationpb.New(31 * time.Second) },
		"stream_heartbeat":    func(tm *jobplanev1.ServerTimings) { tm.StreamHeartbeat = durationpb.New(500 * time.Millisecond) },
		"watch_resume_window": func(tm *jobplanev1.ServerTimings) { tm.WatchResumeWindow = 15 },
		"result_retention":    func(tm *jobplanev1.ServerTimings) { tm.ResultRetention = durationpb.New(time.Minute) },
		"task_executor_heartbeat_timeout": func(tm *jobplanev1.ServerTimings) {
			tm.TaskExecutorHeartbeatTimeout = durationpb.New(1400 * time.Millisecond)
		},
		"task_lease":   func(tm *jobplanev1.ServerTimings) { tm.TaskLease = durationpb.New(time.Second) },
		"plan_recheck": func(tm *jobplanev1.ServerTimings) { tm.PlanRecheck = durationpb.New(61 * time.Second) },
	} {
		tm := proto.CloneOf(defaultTimings)
		mutate(tm)
		got := outOfBounds(tm)
		if len(got) != 1 || !strings.HasPrefix(got[0], "ServerTimings."+field+" = ") {
			t.Errorf("%s out of bounds: reported %q; want one message naming it", field, got)
		}
	}
}

package runner

import (
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
)

// defaultTimings are the timings the runner assumes of a server that
// advertises none (GetClusterOverview.timings unset, a server of contract
// 1.1): the reference server's defaults, from which the runner's waits
// before 1.2 were made.
var defaultTimings = &jobplanev1.ServerTimings{
	SessionTtl: durationpb.New(2 * time.Second), Takeover: durationpb.New(5 * time.Second), JobRegrant: durationpb.New(5 * time.Second),
	RevocationNotice: durationpb.New(5 * time.Second), TaskCancel: durationpb.New(5 * time.Second), SlotYield: durationpb.New(5 * time.Second),
	StreamHeartbeat: durationpb.New(10 * time.Second), WatchResumeWindow: 64, ResultRetention: durationpb.New(0),
	TaskExecutorHeartbeatTimeout: durationpb.New(1200 * time.Millisecond), TaskLease: durationpb.New(10 * time.Second),
	PlanRecheck: durationpb.New(20 * time.Second),
}

// slack is what every wait for the server adds to what the server
// promises: the runner's own delays (its store, its TaskExecutors, a
// loaded machine), so that the server's bounds alone decide.
const slack = 15 * time.Second

// waits are how long the runner waits for what the server promises,
// derived from its advertised timings (jobplane.v1.ServerTimings) and
// scaled by Config.TimingScale. README.md, "Timings the suite takes from
// the server", lists each.
type waits struct {
	// start: a server instance just started leads and serves; not a
	// promise of the contract, so only scaled.
	start time.Duration
	// failover: a new leader of `jobmanager` or of a job acts, after a
	// kill, pause, expiry or revocation: two session TTLs (the old
	// session may have just renewed), and the takeover and the re-grant,
	// or the task lease when longer (a new JobMaster that adopts deploys
	// what no TaskExecutor holds only after it).
	// Also a submission retried through NOT_LEADER, attempts reported
	// RUNNING, a restart seen, a checkpoint, an adoption's first call.
	failover time.Duration
	// result: a job's result, which may wait for a failover and for a
	// job's idle slots given back twice.
	result time.Duration
	// revoke: a deposed leader stops acting and resigns: twice the
	// revocation notice.
	revoke time.Duration
	// cancel: a canceled job's tasks stopped: twice the task cancel bound.
	cancel time.Duration
	// pausedLeader: a new leader after the old one was paused, which
	// may take two failovers (the paused one resumes and is deposed).
	pausedLeader time.Duration
	// cancelFailover: a job canceled before a failover ended.
	cancelFailover time.Duration
	// unknownOutcome and cleanup: a job whose plan put had an unknown
	// outcome runs to its result; a job's cleanup finished after a store
	// fault.
	unknownOutcome, cleanup time.Duration
	// redeploy: the subtasks of an unreachable TaskExecutor deployed
	// elsewhere, after the task lease.
	redeploy time.Duration
	// slotYield: a waiting job's idle slots given back.
	slotYield time.Duration
}

// deriveWaits derives the runner's waits from tm (nil: defaultTimings),
// each multiplied by scale (at least 1). A timing beyond the contract's
// bound counts as the bound: lifecycle/advertised-limits fails such a
// server, and the other cases wait no longer for it than for one that
// conforms.
func deriveWaits(tm *jobplanev1.ServerTimings, scale float64) waits {
	if tm == nil {
		tm = defaultTimings
	}
	scale = max(scale, 1)
	// Each timing at most the bound the contract gives it.
	d := func(x *durationpb.Duration, bound time.Duration) time.Duration {
		return min(max(x.AsDuration(), 0), bound)
	}
	s := func(x time.Duration) time.Duration { return time.Duration(float64(x) * scale) }
	ttl, lease := d(tm.GetSessionTtl(), 10*time.Second), d(tm.GetTaskLease(), 30*time.Second)
	failover := slack + 2*ttl + max(d(tm.GetTakeover(), 10*time.Second)+d(tm.GetJobRegrant(), 10*time.Second), lease)
	return waits{
		start:          s(30 * time.Second),
		failover:       s(failover),
		result:         s(failover + 2*d(tm.GetSlotYield(), 30*time.Second) + 20*time.Second),
		revoke:         s(2 * d(tm.GetRevocationNotice(), 10*time.Second)),
		cancel:         s(2 * d(tm.GetTaskCancel(), 10*time.Second)),
		pausedLeader:   s(2 * failover),
		cancelFailover: s(3 * failover),
		unknownOutcome: s(failover + d(tm.GetPlanRecheck(), time.Minute)),
		cleanup:        s(failover + 10*time.Second),
		redeploy:       s(2*failover + 3*lease),
		slotYield:      s(slack + d(tm.GetSlotYield(), 30*time.Second)),
	}
}

// timingBound is one rule of ServerTimings: the field's name as the
// contract spells it, and what is wrong with tm's value, or "".
type timingBound struct {
	field string
	check func(tm *jobplanev1.ServerTimings) string
}

// timingBounds are the bounds ServerTimings states for every
// implementation.
var timingBounds = []timingBound{
	{"session_ttl", within(func(tm *jobplanev1.ServerTimings) *durationpb.Duration { return tm.GetSessionTtl() }, 1, 10*time.Second)},
	{"takeover", within(func(tm *jobplanev1.ServerTimings) *durationpb.Duration { return tm.GetTakeover() }, 1, 10*time.Second)},
	{"job_regrant", within(func(tm *jobplanev1.ServerTimings) *durationpb.Duration { return tm.GetJobRegrant() }, 1, 10*time.Second)},
	{"revocation_notice", within(func(tm *jobplanev1.ServerTimings) *durationpb.Duration { return tm.GetRevocationNotice() }, 1, 10*time.Second)},
	{"task_cancel", within(func(tm *jobplanev1.ServerTimings) *durationpb.Duration { return tm.GetTaskCancel() }, 1, 10*time.Second)},
	{"slot_yield", within(func(tm *jobplanev1.ServerTimings) *durationpb.Duration { return tm.GetSlotYield() }, 1, 30*time.Second)},
	{"stream_heartbeat", within(func(tm *jobplanev1.ServerTimings) *durationpb.Duration { return tm.GetStreamHeartbeat() }, time.Second, 30*time.Second)},
	{"watch_resume_window", func(tm *jobplanev1.ServerTimings) string {
		if n := tm.GetWatchResumeWindow(); n < 16 {
			return fmt.Sprintf("%d; the contract requires at least 16", n)
		}
		return ""
	}},
	{"result_retention", func(tm *jobplanev1.ServerTimings) string {
		if v := tm.GetResultRetention(); v == nil || v.AsDuration() < 0 || (v.AsDuration() > 0 && v.AsDuration() < 10*time.Minute) {
			return fmt.Sprintf("%v; the contract requires zero (kept for ever) or at least 10m", show(v))
		}
		return ""
	}},
	{"task_executor_heartbeat_timeout", func(tm *jobplanev1.ServerTimings) string {
		v, ttl := tm.GetTaskExecutorHeartbeatTimeout(), tm.GetSessionTtl().AsDuration()
		if v == nil || v.AsDuration() <= 0 || 3*v.AsDuration() >= 2*ttl {
			return fmt.Sprintf("%v; the contract requires it positive and less than two thirds of session_ttl (%v)", show(v), ttl)
		}
		return ""
	}},
	{"task_lease", func(tm *jobplanev1.ServerTimings) string {
		v, hb := tm.GetTaskLease(), tm.GetTaskExecutorHeartbeatTimeout().AsDuration()
		if v == nil || v.AsDuration() < 0 || (v.AsDuration() > 0 && (v.AsDuration() < hb || v.AsDuration() > 30*time.Second)) {
			return fmt.Sprintf("%v; the contract requires zero (no leases), or at least task_executor_heartbeat_timeout (%v) and at most 30s", show(v), hb)
		}
		return ""
	}},
	{"plan_recheck", within(func(tm *jobplanev1.ServerTimings) *durationpb.Duration { return tm.GetPlanRecheck() }, 1, time.Minute)},
}

// within checks that a duration field is set, at least lo and at most hi.
func within(field func(*jobplanev1.ServerTimings) *durationpb.Duration, lo, hi time.Duration) func(*jobplanev1.ServerTimings) string {
	return func(tm *jobplanev1.ServerTimings) string {
		v := field(tm)
		if v == nil || v.AsDuration() < lo || v.AsDuration() > hi {
			if lo <= 1 {
				return fmt.Sprintf("%v; the contract requires it positive and at most %v", show(v), hi)
			}
			return fmt.Sprintf("%v; the contract requires at least %v and at most %v", show(v), lo, hi)
		}
		return ""
	}
}

func show(v *durationpb.Duration) string {
	if v == nil {
		return "unset"
	}
	return v.AsDuration().String()
}

// outOfBounds lists every field of tm outside the contract's bounds, each
// as "ServerTimings.<field> = <value>; <the bound>".
func outOfBounds(tm *jobplanev1.ServerTimings) []string {
	var out []string
	for _, b := range timingBounds {
		if msg := b.check(tm); msg != "" {
			out = append(out, "ServerTimings."+b.field+" = "+msg)
		}
	}
	return out
}

// describe writes tm as "session_ttl 2s, ..., task_lease 10s", in the
// contract's field order.
func describe(tm *jobplanev1.ServerTimings) string {
	var parts []string
	m := tm.ProtoReflect()
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		f := fields.Get(i)
		switch {
		case f.Kind() != protoreflect.MessageKind:
			parts = append(parts, fmt.Sprintf("%s %v", f.Name(), m.Get(f).Interface()))
		case !m.Has(f):
			parts = append(parts, string(f.Name())+" unset")
		default:
			d, _ := m.Get(f).Message().Interface().(*durationpb.Duration)
			parts = append(parts, fmt.Sprintf("%s %v", f.Name(), d.AsDuration()))
		}
	}
	return strings.Join(parts, ", ")
}

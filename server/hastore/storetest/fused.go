package storetest

import (
	"errors"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/server/hastore"
)

// The cases of the calls that a backend may make one write or several
// (FinishJob, PutExecutionPlanAndLead): they check what a caller may rely
// on either way, through the interface only.

func testFinishJob(t T, b *Backend) {
	s := open(t, b)
	ctx := ctxFor(t)
	sess := session(t, s, hastore.SessionConfig{})
	l := campaign(t, sess, election.JobManager, "")
	f := l.Fence()
	for _, id := range []string{"done", "other", "dirty", "stale"} {
		must(t, s.PutExecutionPlan(ctx, f, plan(id, id)))
	}
	entry := func(id string) *hastorev1.JobResultEntry {
		t.Helper()
		e, err := s.GetJobResultEntry(ctx, id)
		if err != nil {
			t.Fatalf("GetJobResultEntry(%s): %v", id, err)
		}
		return e
	}
	finished := func(id string, status jobplanev1.JobStatus) {
		t.Helper()
		if e := entry(id); e.GetState() != hastorev1.JobResultState_JOB_RESULT_STATE_CLEAN || e.GetResult().GetStatus() != status {
			t.Errorf("entry of %s after FinishJob = %v; want it clean with %v", id, e, status)
		}
		if _, err := s.GetExecutionPlan(ctx, id); !errors.Is(err, hastore.ErrPlanNotFound) {
			t.Errorf("GetExecutionPlan(%s) after FinishJob: %v; want ErrPlanNotFound", id, err)
		}
		if got, err := s.CancelRequested(ctx, id); err != nil || got {
			t.Errorf("CancelRequested(%s) after FinishJob = %v, %v; want false", id, got, err)
		}
	}
	planKept := func(id, what string) {
		t.Helper()
		if _, err := s.GetExecutionPlan(ctx, id); err != nil {
			t.Errorf("GetExecutionPlan(%s) after %s: %v; want the plan kept", id, what, err)
		}
	}

	// A job, canceled, finishes: its result clean, its plan and cancel
	// request gone; the same call again succeeds and changes nothing.
	must(t, s.RequestCancel(ctx, f, "done", nil))
	canceled := result("done", jobplanev1.JobStatus_JOB_STATUS_CANCELED)
	must(t, s.FinishJob(ctx, f, canceled))
	finished("done", jobplanev1.JobStatus_JOB_STATUS_CANCELED)
	must(t, s.FinishJob(ctx, f, canceled))
	finished("done", jobplanev1.JobStatus_JOB_STATUS_CANCELED)
	wantErr(t, "FinishJob of another result over a finished job", s.FinishJob(ctx, f, result("done", jobplanev1.JobStatus_JOB_STATUS_FINISHED)), hastore.ErrResultExists)
	finished("done", jobplanev1.JobStatus_JOB_STATUS_CANCELED)

	// A job whose plan is gone already finishes all the same.
	must(t, s.FinishJob(ctx, f, result("noplan", jobplanev1.JobStatus_JOB_STATUS_FAILED)))
	finished("noplan", jobplanev1.JobStatus_JOB_STATUS_FAILED)

	// Over another result, dirty, nothing is written.
	must(t, s.CreateDirtyJobResult(ctx, f, result("other", jobplanev1.JobStatus_JOB_STATUS_FAILED)))
	wantErr(t, "FinishJob over another dirty result", s.FinishJob(ctx, f, result("other", jobplanev1.JobStatus_JOB_STATUS_FINISHED)), hastore.ErrResultExists)
	if e := entry("other"); e.GetState() != hastorev1.JobResultState_JOB_RESULT_STATE_DIRTY || e.GetResult().GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FAILED {
		t.Errorf("entry after a refused FinishJob = %v; want the dirty FAILED one untouched", e)
	}
	planKept("other", "a refused FinishJob")

	// Over an equal result still dirty (an earlier attempt's), a backend
	// in steps completes the cleanup, and one in one write refuses and
	// writes nothing: the caller cleans up after ErrResultExists.
	dirty := result("dirty", jobplanev1.JobStatus_JOB_STATUS_FINISHED)
	must(t, s.CreateDirtyJobResult(ctx, f, dirty))
	switch err := s.FinishJob(ctx, f, dirty); {
	case err == nil:
		finished("dirty", jobplanev1.JobStatus_JOB_STATUS_FINISHED)
	case errors.Is(err, hastore.ErrResultExists):
		if e := entry("dirty"); e.GetState() != hastorev1.JobResultState_JOB_RESULT_STATE_DIRTY {
			t.Errorf("entry after FinishJob refused over an equal dirty result = %v; want it untouched", e)
		}
		planKept("dirty", "a refused FinishJob")
	default:
		t.Errorf("FinishJob over an equal dirty result: %v; want nil or ErrResultExists", err)
	}

	// A leader that resigned writes nothing.
	must(t, l.Resign(ctx))
	campaign(t, sess, election.JobManager, "")
	wantErr(t, "FinishJob with a resigned leader's token", s.FinishJob(ctx, f, result("stale", jobplanev1.JobStatus_JOB_STATUS_FINISHED)), hastore.ErrStaleToken)
	if e, err := s.GetJobResultEntry(ctx, "stale"); !errors.Is(err, hastore.ErrResultNotFound) {
		t.Errorf("GetJobResultEntry after a stale FinishJob = %v, %v; want ErrResultNotFound", e, err)
	}
	planKept("stale", "a stale FinishJob")
}

func testPutExecutionPlanAndLead(t T, b *Backend) {
	s := open(t, b)
	ctx := ctxFor(t)
	sess := session(t, s, hastore.SessionConfig{})
	dispatcher := campaign(t, sess, election.JobManager, "")
	f := dispatcher.Fence()
	const address = "http://127.0.0.1:3"

	// A fresh job: the plan is stored, and the session either leads the
	// job's election already or campaigns for it as usual.
	fresh := plan("fresh", "fresh")
	granted, err := sess.PutExecutionPlanAndLead(ctx, f, fresh, address)
	if err != nil {
		t.Fatalf("PutExecutionPlanAndLead of a fresh job: %v", err)
	}
	if _, err := s.GetExecutionPlan(ctx, "fresh"); err != nil {
		t.Errorf("GetExecutionPlan after PutExecutionPlanAndLead: %v", err)
	}
	if granted == nil {
		if info := leader(t, s, election.Job("fresh")); !info.Token.IsZero() {
			t.Errorf("no leadership granted, but the job's election has a leader %+v; want none, so the caller's campaign leads", info)
		}
		granted = campaign(t, sess, election.Job("fresh"), address)
	}
	if granted.Election() != election.Job("fresh") || granted.Token().SessionID != sess.ID() || !granted.Valid() {
		t.Errorf("the job's leadership = %s %v (valid %v); want the session's, valid, in %s", granted.Election(), granted.Token(), granted.Valid(), election.Job("fresh"))
	}
	if info := leader(t, s, election.Job("fresh")); info.Token != granted.Token() || info.Address != address {
		t.Errorf("leader of the job = %+v; want %v at %s", info, granted.Token(), address)
	}
	must(t, granted.Confirm(ctx, address))

	// A repetition succeeds and changes nothing, also from another
	// session; the session that leads the job may refuse it as a second
	// candidacy. Another plan is refused.
	if l, err := sess.PutExecutionPlanAndLead(ctx, f, fresh, address); l != nil || err != nil && !errors.Is(err, hastore.ErrCandidacyExists) {
		t.Errorf("PutExecutionPlanAndLead repeated by the job's leader = %v, %v; want no grant, and nil or ErrCandidacyExists", l, err)
	}
	other := session(t, open(t, b), hastore.SessionConfig{})
	if l, err := other.PutExecutionPlanAndLead(ctx, f, fresh, address); err != nil || l != nil {
		t.Errorf("PutExecutionPlanAndLead repeated by another session = %v, %v; want the plan kept and no grant", l, err)
	}
	if l, err := other.PutExecutionPlanAndLead(ctx, f, plan("fresh", "another"), address); !errors.Is(err, hastore.ErrPlanExists) || l != nil {
		t.Errorf("PutExecutionPlanAndLead of another plan = %v, %v; want ErrPlanExists", l, err)
	}
	if info := leader(t, s, election.Job("fresh")); info.Token != granted.Token() {
		t.Errorf("leader of the job after repeated puts = %+v; want %v", info, granted.Token())
	}

	// A job whose election has a candidate keeps it: the plan is stored,
	// and the call grants nothing.
	busy := campaign(t, other, election.Job("busy"), "")
	if l, err := sess.PutExecutionPlanAndLead(ctx, f, plan("busy", "busy"), address); err != nil || l != nil {
		t.Errorf("PutExecutionPlanAndLead of a job with a candidate = %v, %v; want the plan stored and no grant", l, err)
	}
	if _, err := s.GetExecutionPlan(ctx, "busy"); err != nil {
		t.Errorf("GetExecutionPlan of the job with a candidate: %v", err)
	}
	if info := leader(t, s, election.Job("busy")); info.Token != busy.Token() {
		t.Errorf("leader of the job with a candidate = %+v; want %v still", info, busy.Token())
	}

	// A refused put enters no candidacy: for a job with a result, and for
	// a stale token.
	must(t, s.CreateDirtyJobResult(ctx, f, result("ended", jobplanev1.JobStatus_JOB_STATUS_FINISHED)))
	if l, err := sess.PutExecutionPlanAndLead(ctx, f, plan("ended", "ended"), address); !errors.Is(err, hastore.ErrResultExists) || l != nil {
		t.Errorf("PutExecutionPlanAndLead of a job with a result = %v, %v; want ErrResultExists", l, err)
	}
	must(t, dispatcher.Resign(ctx))
	campaign(t, sess, election.JobManager, "")
	if l, err := sess.PutExecutionPlanAndLead(ctx, f, plan("late", "late"), address); !errors.Is(err, hastore.ErrStaleToken) || l != nil {
		t.Errorf("PutExecutionPlanAndLead with a resigned leader's token = %v, %v; want ErrStaleToken", l, err)
	}
	for _, id := range []string{"ended", "late"} {
		if _, err := s.GetExecutionPlan(ctx, id); !errors.Is(err, hastore.ErrPlanNotFound) {
			t.Errorf("GetExecutionPlan(%s) after a refused put: %v; want ErrPlanNotFound", id, err)
		}
		if info := leader(t, s, election.Job(id)); !info.Token.IsZero() {
			t.Errorf("leader of %s after a refused put = %+v; want none", id, info)
		}
	}
}

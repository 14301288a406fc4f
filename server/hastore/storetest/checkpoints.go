package storetest

import (
	"errors"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/server/hastore"
)

// checkpointsOf returns the store's checkpoints and savepoints, failing
// the test if it keeps none.
func checkpointsOf(t T, s hastore.Store) hastore.Checkpoints {
	t.Helper()
	c, ok := s.(hastore.Checkpoints)
	if !ok {
		t.Fatalf("the store keeps no checkpoints (hastore.Checkpoints)")
	}
	return c
}

// checkpoint is a completed checkpoint of job with two subtask states;
// tag tells apart two checkpoints of one id.
func checkpoint(jobID string, id uint64, tag string) *hastorev1.CompletedCheckpoint {
	return &hastorev1.CompletedCheckpoint{
		JobId:        jobID,
		CheckpointId: id,
		TriggerTime:  timestamppb.New(time.Unix(1700000000, 0)),
		AckTime:      timestamppb.New(time.Unix(1700000001, 0)),
		States: []*jobplanev1.SubtaskState{
			{VertexId: "v", SubtaskIndex: 0, State: &jobplanev1.SubtaskState_Inline{Inline: []byte(tag)}},
			{VertexId: "v", SubtaskIndex: 1, State: &jobplanev1.SubtaskState_Pointer{Pointer: "file:///state/" + tag}},
		},
		Counts: &jobplanev1.CheckpointCounts{Triggered: int64(id), Completed: int64(id)},
	}
}

// savepoint is a savepoint of job under checkpoint id; tag tells apart
// two savepoints of one savepoint id.
func savepoint(spID, jobID string, id uint64, tag string) *hastorev1.Savepoint {
	return &hastorev1.Savepoint{
		SavepointId:  spID,
		JobId:        jobID,
		CheckpointId: id,
		TriggerTime:  timestamppb.New(time.Unix(1700000000, 0)),
		States:       []*jobplanev1.SubtaskState{{VertexId: "v", State: &jobplanev1.SubtaskState_Inline{Inline: []byte(tag)}}},
	}
}

// runningJob puts a plan for each job, fenced by a new jobmanager
// leadership, which it returns.
func runningJob(t T, s hastore.Store, jobIDs ...string) *hastore.Leadership {
	t.Helper()
	jm := campaign(t, session(t, s, hastore.SessionConfig{}), election.JobManager, "")
	for _, id := range jobIDs {
		must(t, s.PutExecutionPlan(ctxFor(t), jm.Fence(), plan(id, id)))
	}
	return jm
}

// wantLatest checks the job's latest checkpoint (its id, 0 for none, and
// its content if want is set) and last id.
func wantLatest(t T, what string, c hastore.Checkpoints, jobID string, wantID, wantLast uint64, want *hastorev1.CompletedCheckpoint) {
	t.Helper()
	cp, last, err := c.LatestCheckpoint(ctxFor(t), jobID)
	switch {
	case err != nil:
		t.Errorf("LatestCheckpoint %s: %v", what, err)
	case cp.GetCheckpointId() != wantID || last != wantLast:
		t.Errorf("LatestCheckpoint %s = checkpoint %d, last id %d; want checkpoint %d, last id %d", what, cp.GetCheckpointId(), last, wantID, wantLast)
	case want != nil && !proto.Equal(cp, want):
		t.Errorf("LatestCheckpoint %s = %v; want %v", what, cp, want)
	}
}

// wantCheckpoints checks the ids of the job's stored checkpoints.
func wantCheckpoints(t T, what string, c hastore.Checkpoints, jobID string, want ...uint64) {
	t.Helper()
	cps, err := c.ListCheckpoints(ctxFor(t), jobID, 0, 0)
	if err != nil {
		t.Errorf("ListCheckpoints %s: %v", what, err)
		return
	}
	var got []uint64
	for _, cp := range cps {
		got = append(got, cp.GetCheckpointId())
	}
	if !slices.Equal(got, want) {
		t.Errorf("checkpoints %s = %v; want %v", what, got, want)
	}
}

// wantSavepoints checks the ids of the savepoints listed for jobID (all
// if empty).
func wantSavepoints(t T, what string, c hastore.Checkpoints, jobID string, want ...string) {
	t.Helper()
	sps, err := c.ListSavepoints(ctxFor(t), jobID, "", 0)
	if err != nil {
		t.Errorf("ListSavepoints %s: %v", what, err)
		return
	}
	var got []string
	for _, sp := range sps {
		got = append(got, sp.GetSavepointId())
	}
	if !slices.Equal(got, want) {
		t.Errorf("savepoints %s = %v; want %v", what, got, want)
	}
}

// wantInvalid checks that err is a *hastore.ValidationError naming field.
func wantInvalid(t T, what string, err error, field string) {
	t.Helper()
	var verr *hastore.ValidationError
	switch {
	case !errors.Is(err, hastore.ErrInvalidArgument) || !errors.As(err, &verr):
		t.Errorf("%s: err = %v, want a ValidationError on %s", what, err, field)
	case !hasField(verr, field):
		t.Errorf("%s: violations %+v lack field %q", what, verr.Violations, field)
	}
}

func addCheckpoint(t T, c hastore.Checkpoints, f hastore.Fence, cp *hastorev1.CompletedCheckpoint, retain int, wantSubsumed ...uint64) {
	t.Helper()
	subsumed, err := c.AddCheckpoint(ctxFor(t), f, cp, retain)
	if err != nil || !slices.Equal(subsumed, wantSubsumed) {
		t.Fatalf("AddCheckpoint %d of %s (retain %d) = %v, %v; want %v subsumed", cp.GetCheckpointId(), cp.GetJobId(), retain, subsumed, err, wantSubsumed)
	}
}

// testCheckpointFencing checks that a job's checkpoints and savepoints are
// written only under its own election's current token, and savepoints
// deleted only under the jobmanager's.
func testCheckpointFencing(t T, b *Backend) {
	s := open(t, b)
	c := checkpointsOf(t, s)
	ctx := ctxFor(t)
	jm := runningJob(t, s, "j", "k")
	sess := session(t, s, hastore.SessionConfig{})
	old := campaign(t, sess, election.Job("j"), "")
	other := campaign(t, sess, election.Job("k"), "")
	addCheckpoint(t, c, old.Fence(), checkpoint("j", 1, "a"), 1)

	_, err := c.AddCheckpoint(ctx, jm.Fence(), checkpoint("j", 2, "b"), 1)
	wantInvalid(t, "AddCheckpoint fenced by the jobmanager election", err, "fence.election")
	_, err = c.AddCheckpoint(ctx, other.Fence(), checkpoint("j", 2, "b"), 1)
	wantInvalid(t, "AddCheckpoint fenced by another job's election", err, "fence.election")
	wantInvalid(t, "AddSavepoint fenced by the jobmanager election", c.AddSavepoint(ctx, jm.Fence(), savepoint("sp", "j", 2, "b")), "fence.election")
	wantInvalid(t, "AddSavepoint fenced by another job's election", c.AddSavepoint(ctx, other.Fence(), savepoint("sp", "j", 2, "b")), "fence.election")
	wantLatest(t, "after writes under other elections", c, "j", 1, 1, checkpoint("j", 1, "a"))

	must(t, old.Resign(ctx))
	current := campaign(t, session(t, s, hastore.SessionConfig{}), election.Job("j"), "")
	_, err = c.AddCheckpoint(ctx, old.Fence(), checkpoint("j", 2, "b"), 1)
	wantErr(t, "AddCheckpoint under a resigned token", err, hastore.ErrStaleToken)
	_, err = c.AddCheckpoint(ctx, old.Fence(), checkpoint("j", 1, "a"), 1)
	wantErr(t, "AddCheckpoint of the stored checkpoint again under a resigned token", err, hastore.ErrStaleToken)
	_, err = c.AddCheckpoint(ctx, old.Fence(), checkpoint("j", 1, "other"), 1)
	wantErr(t, "AddCheckpoint of a used id under a resigned token (the fence comes first)", err, hastore.ErrStaleToken)
	wantErr(t, "AddSavepoint under a resigned token", c.AddSavepoint(ctx, old.Fence(), savepoint("sp", "j", 2, "b")), hastore.ErrStaleToken)
	wantLatest(t, "after stale writes", c, "j", 1, 1, checkpoint("j", 1, "a"))
	wantSavepoints(t, "after stale writes", c, "")

	must(t, c.AddSavepoint(ctx, current.Fence(), savepoint("sp", "j", 2, "b")))
	addCheckpoint(t, c, current.Fence(), checkpoint("j", 3, "c"), 1, 1)
	wantInvalid(t, "DeleteSavepoint fenced by the job's election", c.DeleteSavepoint(ctx, current.Fence(), "sp"), "fence.election")
	must(t, jm.Resign(ctx))
	runningJob(t, s)
	wantErr(t, "DeleteSavepoint under a resigned jobmanager token", c.DeleteSavepoint(ctx, jm.Fence(), "sp"), hastore.ErrStaleToken)
	wantSavepoints(t, "after refused deletes", c, "", "sp")
	wantLatest(t, "at the end", c, "j", 3, 3, checkpoint("j", 3, "c"))
}

// testCheckpointIDsIncrease checks that a job's checkpoint and savepoint
// ids strictly increase, across leaders and restarts, and that a repeated
// checkpoint is a retry.
func testCheckpointIDsIncrease(t T, b *Backend) {
	s := open(t, b)
	c := checkpointsOf(t, s)
	ctx := ctxFor(t)
	jm := runningJob(t, s, "j")
	l1 := campaign(t, session(t, s, hastore.SessionConfig{}), election.Job("j"), "")
	addCheckpoint(t, c, l1.Fence(), checkpoint("j", 5, "five"), 3)

	_, err := c.AddCheckpoint(ctx, l1.Fence(), checkpoint("j", 3, "three"), 3)
	var idErr *hastore.CheckpointIDError
	switch {
	case !errors.Is(err, hastore.ErrCheckpointIDNotIncreasing):
		t.Errorf("AddCheckpoint of a lower id: err = %v, want ErrCheckpointIDNotIncreasing", err)
	case !errors.As(err, &idErr) || idErr.Last != 5 || idErr.ID != 3 || idErr.JobID != "j":
		t.Errorf("AddCheckpoint of a lower id: err = %#v, want a *CheckpointIDError of job j, id 3, last 5", err)
	}
	_, err = c.AddCheckpoint(ctx, l1.Fence(), checkpoint("j", 5, "another five"), 3)
	wantErr(t, "AddCheckpoint of another checkpoint under the last id", err, hastore.ErrCheckpointIDNotIncreasing)
	// The same checkpoint again is a retry: it succeeds and changes nothing.
	addCheckpoint(t, c, l1.Fence(), checkpoint("j", 5, "five"), 3)
	wantLatest(t, "after refused and repeated ids", c, "j", 5, 5, checkpoint("j", 5, "five"))
	wantCheckpoints(t, "after refused and repeated ids", c, "j", 5)

	// A savepoint's id counts in the job's last id.
	must(t, c.AddSavepoint(ctx, l1.Fence(), savepoint("sp", "j", 7, "seven")))
	wantLatest(t, "after a savepoint", c, "j", 5, 7, nil)
	_, err = c.AddCheckpoint(ctx, l1.Fence(), checkpoint("j", 6, "six"), 3)
	wantErr(t, "AddCheckpoint below a savepoint's id", err, hastore.ErrCheckpointIDNotIncreasing)
	_, err = c.AddCheckpoint(ctx, l1.Fence(), checkpoint("j", 7, "seven"), 3)
	wantErr(t, "AddCheckpoint of a savepoint's id", err, hastore.ErrCheckpointIDNotIncreasing)
	wantErr(t, "AddSavepoint of a used id", c.AddSavepoint(ctx, l1.Fence(), savepoint("sp2", "j", 6, "six")), hastore.ErrCheckpointIDNotIncreasing)

	// A new leader of the job reads the last id and goes on above it.
	must(t, l1.Resign(ctx))
	l2 := campaign(t, session(t, open(t, b), hastore.SessionConfig{}), election.Job("j"), "")
	wantLatest(t, "under a new leader", c, "j", 5, 7, nil)
	_, err = c.AddCheckpoint(ctx, l2.Fence(), checkpoint("j", 6, "six"), 3)
	wantErr(t, "AddCheckpoint of a used id under a new leader", err, hastore.ErrCheckpointIDNotIncreasing)
	addCheckpoint(t, c, l2.Fence(), checkpoint("j", 8, "eight"), 3)
	wantCheckpoints(t, "under a new leader", c, "j", 5, 8)
	if b.Restart == nil {
		return
	}
	must(t, l2.Resign(ctx))
	must(t, jm.Resign(ctx))
	b.Restart(t)
	s = open(t, b)
	c = checkpointsOf(t, s)
	wantLatest(t, "after a restart of the store", c, "j", 8, 8, checkpoint("j", 8, "eight"))
	l3 := awaitGrant(t, campaignAsync(ctx, session(t, s, hastore.SessionConfig{}), election.Job("j"), ""))
	_, err = c.AddCheckpoint(ctx, l3.Fence(), checkpoint("j", 8, "another eight"), 3)
	wantErr(t, "AddCheckpoint of a used id after a restart", err, hastore.ErrCheckpointIDNotIncreasing)
	addCheckpoint(t, c, l3.Fence(), checkpoint("j", 9, "nine"), 3)
	wantCheckpoints(t, "after a restart of the store", c, "j", 5, 8, 9)
}

// testCheckpointRetention checks that a job keeps its newest retained
// checkpoints: the older ones go in the write that adds a newer one, the
// latest is always there, and the last id outlives what was subsumed.
func testCheckpointRetention(t T, b *Backend) {
	s := open(t, b)
	c := checkpointsOf(t, s)
	ctx := ctxFor(t)
	runningJob(t, s, "j", "k")
	sess := session(t, s, hastore.SessionConfig{})
	l := campaign(t, sess, election.Job("j"), "")
	k := campaign(t, sess, election.Job("k"), "")
	addCheckpoint(t, c, k.Fence(), checkpoint("k", 1, "k1"), 1) // another job's, untouched
	for id := uint64(1); id <= 3; id++ {
		addCheckpoint(t, c, l.Fence(), checkpoint("j", id, "j"), 3)
		wantLatest(t, "after an add", c, "j", id, id, checkpoint("j", id, "j"))
	}
	addCheckpoint(t, c, l.Fence(), checkpoint("j", 4, "j"), 3, 1)
	wantCheckpoints(t, "after a fourth add, retaining 3", c, "j", 2, 3, 4)
	// Retain 0 means 1: the new one only.
	addCheckpoint(t, c, l.Fence(), checkpoint("j", 6, "j"), 0, 2, 3, 4)
	wantCheckpoints(t, "after an add retaining 0", c, "j", 6)
	wantLatest(t, "after subsuming all others", c, "j", 6, 6, checkpoint("j", 6, "j"))
	// A retry of a subsumed checkpoint is no retry: its id was used.
	_, err := c.AddCheckpoint(ctx, l.Fence(), checkpoint("j", 4, "j"), 3)
	wantErr(t, "AddCheckpoint of a subsumed checkpoint", err, hastore.ErrCheckpointIDNotIncreasing)
	must(t, c.AddSavepoint(ctx, l.Fence(), savepoint("sp", "j", 7, "j")))
	for _, id := range []uint64{8, 10, 11, 12} {
		addCheckpoint(t, c, l.Fence(), checkpoint("j", id, "j"), 5)
	}
	wantCheckpoints(t, "after adds retaining 5", c, "j", 6, 8, 10, 11, 12)
	var paged []uint64
	after := uint64(0)
	for range 6 {
		page, err := c.ListCheckpoints(ctx, "j", after, 2)
		if err != nil {
			t.Fatalf("ListCheckpoints after %d: %v", after, err)
		}
		if len(page) == 0 {
			break
		}
		if len(page) > 2 {
			t.Errorf("ListCheckpoints after %d, limit 2: %d checkpoints", after, len(page))
		}
		for _, cp := range page {
			paged = append(paged, cp.GetCheckpointId())
		}
		after = page[len(page)-1].GetCheckpointId()
	}
	if !slices.Equal(paged, []uint64{6, 8, 10, 11, 12}) {
		t.Errorf("checkpoints by pages of 2 = %v; want [6 8 10 11 12]", paged)
	}
	addCheckpoint(t, c, l.Fence(), checkpoint("j", 13, "j"), 2, 6, 8, 10, 11)
	wantCheckpoints(t, "after an add retaining 2", c, "j", 12, 13)
	wantSavepoints(t, "after subsumption", c, "j", "sp")
	wantCheckpoints(t, "of another job", c, "k", 1)
	for _, retain := range []int{-1, hastore.MaxRetainedCheckpoints + 1} {
		_, err := c.AddCheckpoint(ctx, l.Fence(), checkpoint("j", 20, "j"), retain)
		wantInvalid(t, "AddCheckpoint with a retain out of range", err, "retain")
	}
	wantLatest(t, "at the end", c, "j", 13, 13, nil)
}

// testCheckpointsGoWithTheJob checks that checkpoints are added only
// while the job has a plan and no result, and go with its plan, by
// DeleteExecutionPlan and by FinishJob, last id included.
func testCheckpointsGoWithTheJob(t T, b *Backend) {
	s := open(t, b)
	c := checkpointsOf(t, s)
	ctx := ctxFor(t)
	sess := session(t, s, hastore.SessionConfig{})
	jm := runningJob(t, s)
	j := campaign(t, sess, election.Job("j"), "")
	_, err := c.AddCheckpoint(ctx, j.Fence(), checkpoint("j", 1, "j"), 3)
	wantErr(t, "AddCheckpoint of a job without a plan", err, hastore.ErrPlanNotFound)
	wantErr(t, "AddSavepoint of a job without a plan", c.AddSavepoint(ctx, j.Fence(), savepoint("sp-j", "j", 1, "j")), hastore.ErrPlanNotFound)
	wantLatest(t, "of a job without a plan", c, "j", 0, 0, nil)

	must(t, s.PutExecutionPlan(ctx, jm.Fence(), plan("j", "j")))
	addCheckpoint(t, c, j.Fence(), checkpoint("j", 1, "j"), 3)
	addCheckpoint(t, c, j.Fence(), checkpoint("j", 2, "j"), 3)
	must(t, c.AddSavepoint(ctx, j.Fence(), savepoint("sp-j", "j", 3, "j")))
	must(t, s.CreateDirtyJobResult(ctx, jm.Fence(), result("j", jobplanev1.JobStatus_JOB_STATUS_FINISHED)))
	_, err = c.AddCheckpoint(ctx, j.Fence(), checkpoint("j", 4, "j"), 3)
	var terminal *hastore.JobTerminalError
	if !errors.As(err, &terminal) || terminal.Status != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Errorf("AddCheckpoint of a job with a result: err = %v, want a *JobTerminalError of FINISHED", err)
	}
	wantErr(t, "AddSavepoint of a job with a result", c.AddSavepoint(ctx, j.Fence(), savepoint("sp-j2", "j", 4, "j")), hastore.ErrJobTerminal)
	wantCheckpoints(t, "of a job with a result, before its plan is deleted", c, "j", 1, 2)
	must(t, s.DeleteExecutionPlan(ctx, jm.Fence(), "j"))
	wantLatest(t, "after DeleteExecutionPlan", c, "j", 0, 0, nil)
	wantCheckpoints(t, "after DeleteExecutionPlan", c, "j")
	wantSavepoints(t, "after DeleteExecutionPlan", c, "j", "sp-j")

	// FinishJob removes them as DeleteExecutionPlan does.
	must(t, s.PutExecutionPlan(ctx, jm.Fence(), plan("f", "f")))
	f := campaign(t, sess, election.Job("f"), "")
	addCheckpoint(t, c, f.Fence(), checkpoint("f", 1, "f"), 3)
	addCheckpoint(t, c, f.Fence(), checkpoint("f", 2, "f"), 3)
	must(t, s.FinishJob(ctx, jm.Fence(), result("f", jobplanev1.JobStatus_JOB_STATUS_FAILED)))
	wantLatest(t, "after FinishJob", c, "f", 0, 0, nil)
	wantCheckpoints(t, "after FinishJob", c, "f")

	// Once its result is gone too, the id is a new job's, whose ids start
	// anew.
	must(t, s.DeleteJobResultEntry(ctx, jm.Fence(), "f"))
	must(t, s.PutExecutionPlan(ctx, jm.Fence(), plan("f", "f again")))
	addCheckpoint(t, c, f.Fence(), checkpoint("f", 1, "f again"), 3)
	wantLatest(t, "of a new job under a used id", c, "f", 1, 1, checkpoint("f", 1, "f again"))
}

// testSavepoints checks that savepoints are created once, listed by job
// and by pages, outlive their job, and are deleted only by the
// jobmanager's leader, idempotently.
func testSavepoints(t T, b *Backend) {
	s := open(t, b)
	c := checkpointsOf(t, s)
	ctx := ctxFor(t)
	jm := runningJob(t, s, "a", "b")
	sess := session(t, s, hastore.SessionConfig{})
	a := campaign(t, sess, election.Job("a"), "")
	bl := campaign(t, sess, election.Job("b"), "")
	must(t, c.AddSavepoint(ctx, a.Fence(), savepoint("sp-2", "a", 1, "a1")))
	must(t, c.AddSavepoint(ctx, bl.Fence(), savepoint("sp-1", "b", 1, "b1")))
	must(t, c.AddSavepoint(ctx, a.Fence(), savepoint("sp-3", "a", 2, "a2")))
	must(t, c.AddSavepoint(ctx, a.Fence(), savepoint("sp-2", "a", 1, "a1"))) // a retry
	wantErr(t, "AddSavepoint of another savepoint under a used savepoint id", c.AddSavepoint(ctx, a.Fence(), savepoint("sp-2", "a", 5, "a5")), hastore.ErrSavepointExists)
	wantErr(t, "AddSavepoint under another job's savepoint id", c.AddSavepoint(ctx, a.Fence(), savepoint("sp-1", "a", 6, "a6")), hastore.ErrSavepointExists)
	wantLatest(t, "after refused savepoints", c, "a", 0, 2, nil)
	if sp, err := c.GetSavepoint(ctx, "sp-2"); err != nil || !proto.Equal(sp, savepoint("sp-2", "a", 1, "a1")) {
		t.Errorf("GetSavepoint sp-2 = %v, %v; want the first one", sp, err)
	}
	_, err := c.GetSavepoint(ctx, "sp-none")
	wantErr(t, "GetSavepoint of an absent id", err, hastore.ErrSavepointNotFound)
	wantSavepoints(t, "of every job", c, "", "sp-1", "sp-2", "sp-3")
	wantSavepoints(t, "of job a", c, "a", "sp-2", "sp-3")
	wantSavepoints(t, "of job b", c, "b", "sp-1")
	var paged []string
	after := ""
	for range 4 {
		page, err := c.ListSavepoints(ctx, "a", after, 1)
		if err != nil {
			t.Fatalf("ListSavepoints after %q: %v", after, err)
		}
		if len(page) == 0 {
			break
		}
		if len(page) > 1 {
			t.Errorf("ListSavepoints after %q, limit 1: %d savepoints", after, len(page))
		}
		paged = append(paged, page[0].GetSavepointId())
		after = page[len(page)-1].GetSavepointId()
	}
	if !slices.Equal(paged, []string{"sp-2", "sp-3"}) {
		t.Errorf("savepoints of job a by pages of 1 = %v; want [sp-2 sp-3]", paged)
	}

	// Savepoints outlive their job's cleanup, both ways.
	must(t, s.CreateDirtyJobResult(ctx, jm.Fence(), result("a", jobplanev1.JobStatus_JOB_STATUS_CANCELED)))
	must(t, s.DeleteExecutionPlan(ctx, jm.Fence(), "a"))
	must(t, s.FinishJob(ctx, jm.Fence(), result("b", jobplanev1.JobStatus_JOB_STATUS_FINISHED)))
	wantSavepoints(t, "after their jobs' cleanup", c, "", "sp-1", "sp-2", "sp-3")

	wantInvalid(t, "DeleteSavepoint fenced by its job's election", c.DeleteSavepoint(ctx, a.Fence(), "sp-2"), "fence.election")
	must(t, c.DeleteSavepoint(ctx, jm.Fence(), "sp-2"))
	must(t, c.DeleteSavepoint(ctx, jm.Fence(), "sp-2"))    // idempotent
	must(t, c.DeleteSavepoint(ctx, jm.Fence(), "sp-none")) // never stored
	_, err = c.GetSavepoint(ctx, "sp-2")
	wantErr(t, "GetSavepoint of a deleted savepoint", err, hastore.ErrSavepointNotFound)
	wantSavepoints(t, "after a delete, from another client", checkpointsOf(t, open(t, b)), "", "sp-1", "sp-3")
	if b.Restart == nil {
		return
	}
	must(t, jm.Resign(ctx))
	must(t, sess.Close(ctx))
	b.Restart(t)
	wantSavepoints(t, "after a restart of the store", checkpointsOf(t, open(t, b)), "", "sp-1", "sp-3")
}

// testCheckpointBadInput checks that malformed checkpoints and savepoints
// are refused with a field violation naming the field, and write nothing.
func testCheckpointBadInput(t T, b *Backend) {
	s := open(t, b)
	c := checkpointsOf(t, s)
	ctx := ctxFor(t)
	jm := runningJob(t, s, "j")
	f := campaign(t, session(t, s, hastore.SessionConfig{}), election.Job("j"), "").Fence()
	twice := checkpoint("j", 1, "x")
	twice.States[1].SubtaskIndex = 0
	noVertex := checkpoint("j", 1, "x")
	noVertex.States[0].VertexId = ""
	negative := checkpoint("j", 1, "x")
	negative.States[0].SubtaskIndex = -1
	longPointer := checkpoint("j", 1, "x")
	longPointer.States[1].State = &jobplanev1.SubtaskState_Pointer{Pointer: strings.Repeat("p", hastore.MaxStatePointerLength+1)}
	big := checkpoint("j", 1, "x")
	big.States[0].State = &jobplanev1.SubtaskState_Inline{Inline: make([]byte, b.MaxPlanBytes)}
	spTwice := savepoint("sp", "j", 1, "x")
	spTwice.States = twice.States
	for _, tc := range []struct {
		name  string
		field string
		err   error
	}{
		{"checkpoint id 0", "checkpoint.checkpoint_id", second(c.AddCheckpoint(ctx, f, checkpoint("j", 0, "x"), 1))},
		{"checkpoint without job id", "checkpoint.job_id", second(c.AddCheckpoint(ctx, f, checkpoint("", 1, "x"), 1))},
		{"nil checkpoint", "checkpoint", second(c.AddCheckpoint(ctx, f, nil, 1))},
		{"two states of one subtask", "checkpoint.states[1]", second(c.AddCheckpoint(ctx, f, twice, 1))},
		{"state without vertex", "checkpoint.states[0].vertex_id", second(c.AddCheckpoint(ctx, f, noVertex, 1))},
		{"state of a negative subtask", "checkpoint.states[0].subtask_index", second(c.AddCheckpoint(ctx, f, negative, 1))},
		{"pointer over 2048 bytes", "checkpoint.states[1].pointer", second(c.AddCheckpoint(ctx, f, longPointer, 1))},
		{"checkpoint over the size limit", "checkpoint", second(c.AddCheckpoint(ctx, f, big, 1))},
		{"savepoint without id", "savepoint.savepoint_id", c.AddSavepoint(ctx, f, savepoint("", "j", 1, "x"))},
		{"savepoint id over 128 bytes", "savepoint.savepoint_id", c.AddSavepoint(ctx, f, savepoint(strings.Repeat("s", hastore.MaxSavepointIDLength+1), "j", 1, "x"))},
		{"savepoint of checkpoint id 0", "savepoint.checkpoint_id", c.AddSavepoint(ctx, f, savepoint("sp", "j", 0, "x"))},
		{"savepoint with two states of one subtask", "savepoint.states[1]", c.AddSavepoint(ctx, f, spTwice)},
		{"latest of a bad job id", "job_id", third(c.LatestCheckpoint(ctx, "a/b"))},
		{"get of an empty savepoint id", "savepoint_id", second(c.GetSavepoint(ctx, ""))},
		{"delete of an empty savepoint id", "savepoint_id", c.DeleteSavepoint(ctx, jm.Fence(), "")},
	} {
		wantInvalid(t, tc.name, tc.err, tc.field)
	}
	wantLatest(t, "after bad input", c, "j", 0, 0, nil)
	wantSavepoints(t, "after bad input", c, "")
}

func second[A any](_ A, err error) error        { return err }
func third[A, B any](_ A, _ B, err error) error { return err }

package storetest

import (
	"errors"
	"sync"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/server/hastore"
)

// The cases of the store's consistency model beyond single writes: which
// put created a plan, and the order of a job's cleanup that the store
// itself keeps.

// concurrentPuts is how many identical puts testPlanCreatedOnce makes at
// once.
const concurrentPuts = 8

func testPlanCreatedOnce(t T, b *Backend) {
	s := open(t, b)
	ctx := ctxFor(t)
	f := campaign(t, session(t, s, hastore.SessionConfig{}), election.JobManager, "").Fence()
	var (
		wg      sync.WaitGroup
		created = make([]bool, concurrentPuts)
		errs    = make([]error, concurrentPuts)
	)
	for i := range concurrentPuts {
		wg.Go(func() { created[i], errs[i] = s.PutExecutionPlanCreated(ctx, f, plan("once", "once")) })
	}
	wg.Wait()
	n := 0
	for i := range concurrentPuts {
		if errs[i] != nil {
			t.Errorf("concurrent PutExecutionPlanCreated #%d of the same plan: %v", i, errs[i])
		}
		if created[i] {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d concurrent puts of the same plan answered created=true %d times (%v); want exactly once", concurrentPuts, n, created)
	}
	if c, err := s.PutExecutionPlanCreated(ctx, f, plan("once", "once")); err != nil || c {
		t.Errorf("PutExecutionPlanCreated repeated after the puts = %v, %v; want created=false", c, err)
	}
	if c, err := s.PutExecutionPlanCreated(ctx, f, plan("once", "another")); !errors.Is(err, hastore.ErrPlanExists) || c {
		t.Errorf("PutExecutionPlanCreated of another plan = %v, %v; want created=false, ErrPlanExists", c, err)
	}
	if c, err := s.PutExecutionPlanCreated(ctx, f, plan("next", "next")); err != nil || !c {
		t.Errorf("PutExecutionPlanCreated of a new job's plan = %v, %v; want created=true", c, err)
	}
}

func testResultCleanAfterThePlan(t T, b *Backend) {
	s := open(t, b)
	ctx := ctxFor(t)
	f := campaign(t, session(t, s, hastore.SessionConfig{}), election.JobManager, "").Fence()
	must(t, s.PutExecutionPlan(ctx, f, plan("j", "j")))
	must(t, s.CreateDirtyJobResult(ctx, f, result("j", jobplanev1.JobStatus_JOB_STATUS_FINISHED)))
	wantErr(t, "MarkJobResultClean while the plan exists", s.MarkJobResultClean(ctx, f, "j"), hastore.ErrPlanNotDeleted)
	if err := s.DeleteJobResultEntry(ctx, f, "j"); !errors.Is(err, hastore.ErrResultDirty) && !errors.Is(err, hastore.ErrPlanNotDeleted) {
		t.Errorf("DeleteJobResultEntry while the plan exists: err = %v, want %v or %v", err, hastore.ErrResultDirty, hastore.ErrPlanNotDeleted)
	}
	state := func(what string, want hastorev1.JobResultState) {
		t.Helper()
		if e, err := s.GetJobResultEntry(ctx, "j"); err != nil || e.GetState() != want {
			t.Errorf("entry %s = %v, %v; want %v", what, e, err, want)
		}
	}
	state("after the refusals", hastorev1.JobResultState_JOB_RESULT_STATE_DIRTY)
	if _, err := s.GetExecutionPlan(ctx, "j"); err != nil {
		t.Errorf("GetExecutionPlan after the refusals: %v; want the plan kept", err)
	}
	// Once the plan is deleted, the cleanup goes on.
	must(t, s.DeleteExecutionPlan(ctx, f, "j"))
	must(t, s.MarkJobResultClean(ctx, f, "j"))
	state("after the cleanup", hastorev1.JobResultState_JOB_RESULT_STATE_CLEAN)
	must(t, s.DeleteJobResultEntry(ctx, f, "j"))
	if _, err := s.GetJobResultEntry(ctx, "j"); !errors.Is(err, hastore.ErrResultNotFound) {
		t.Errorf("GetJobResultEntry after the delete: %v; want ErrResultNotFound", err)
	}
}

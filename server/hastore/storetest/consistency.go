package storetest

import (
	"errors"
	"fmt"
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

// cancelRaceJobs is how many jobs testCancelRacesResult cancels and
// finishes at once, in each of cancelRaceRounds rounds.
const (
	cancelRaceJobs   = 16
	cancelRaceRounds = 3
)

// testCancelRacesResult sends, for each of many jobs at once, a cancel
// request and a FINISHED or FAILED result at the same instant: whatever
// order the store applies them in, exactly one is taken. A store that
// applies writes in batches must keep the two apart, or each sees the
// state before the other and both apply: a cancellation acknowledged to a
// client beside a result it overrides.
func testCancelRacesResult(t T, b *Backend) {
	s := open(t, b)
	ctx := ctxFor(t)
	f := campaign(t, session(t, s, hastore.SessionConfig{}), election.JobManager, "").Fence()
	for round := range cancelRaceRounds {
		id := func(i int) string { return fmt.Sprintf("race-%d-%02d", round, i) }
		for i := range cancelRaceJobs {
			must(t, s.PutExecutionPlan(ctx, f, plan(id(i), id(i))))
		}
		var (
			wg                  sync.WaitGroup
			start               = make(chan struct{})
			cancelErrs, resErrs = make([]error, cancelRaceJobs), make([]error, cancelRaceJobs)
			statuses            = make([]jobplanev1.JobStatus, cancelRaceJobs)
		)
		for i := range cancelRaceJobs {
			statuses[i] = jobplanev1.JobStatus_JOB_STATUS_FINISHED
			if i%2 == 1 {
				statuses[i] = jobplanev1.JobStatus_JOB_STATUS_FAILED
			}
			wg.Go(func() {
				<-start
				cancelErrs[i] = s.RequestCancel(ctx, f, id(i), &jobplanev1.Cancellation{RequestId: "race", Reason: "racing the result"})
			})
			wg.Go(func() {
				<-start
				resErrs[i] = s.CreateDirtyJobResult(ctx, f, result(id(i), statuses[i]))
			})
		}
		close(start)
		wg.Wait()
		for i := range cancelRaceJobs {
			cancelErr, resErr := cancelErrs[i], resErrs[i]
			var terminal *hastore.JobTerminalError
			switch {
			case cancelErr == nil && resErr == nil:
				t.Errorf("job %s: RequestCancel and CreateDirtyJobResult(%v) sent at once both succeeded; want exactly one taken (a %v result is refused once a cancel is recorded, a cancel refused once the job has a result)", id(i), statuses[i], statuses[i])
			case cancelErr == nil && !errors.Is(resErr, hastore.ErrCancelRequested):
				t.Errorf("job %s: the cancel request was taken and CreateDirtyJobResult(%v) answered %v; want ErrCancelRequested", id(i), statuses[i], resErr)
			case resErr == nil && (!errors.As(cancelErr, &terminal) || terminal.Status != statuses[i]):
				t.Errorf("job %s: the %v result was taken and RequestCancel answered %v; want a *JobTerminalError with %v", id(i), statuses[i], cancelErr, statuses[i])
			case cancelErr != nil && resErr != nil:
				t.Errorf("job %s: RequestCancel = %v and CreateDirtyJobResult(%v) = %v; want exactly one taken", id(i), cancelErr, statuses[i], resErr)
			}
			// What the store holds agrees with the answers.
			requested, err := s.CancelRequested(ctx, id(i))
			if err != nil {
				t.Fatalf("CancelRequested(%s): %v", id(i), err)
			}
			_, getErr := s.GetJobResultEntry(ctx, id(i))
			if requested && getErr == nil {
				t.Errorf("job %s holds both a cancel request and a %v result after the race; want one of them", id(i), statuses[i])
			}
		}
	}
}

package etcdstore_test

import (
	"errors"
	"testing"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/server/hastore"
)

// FinishJob records the result clean and removes the plan in one write;
// a job with a result, or a stale token, gets nothing written.
func TestFinishJobOneWrite(t *testing.T) {
	t.Parallel()
	env, ctx := newPlanLeadEnv(t, "/fin/")
	for _, id := range []string{"done", "again", "stale"} {
		if err := env.store.PutExecutionPlan(ctx, env.f, testPlan(id)); err != nil {
			t.Fatal(err)
		}
	}
	if err := env.store.RequestCancel(ctx, env.f, "done", nil); err != nil {
		t.Fatal(err)
	}
	// A job whose cancellation was requested ends CANCELED (a FINISHED
	// result is refused then: storetest's CancelBeforeResult).
	res := &jobplanev1.JobResult{JobId: "done", Status: jobplanev1.JobStatus_JOB_STATUS_CANCELED}
	if err := env.store.FinishJob(ctx, env.f, res); err != nil {
		t.Fatal(err)
	}
	if canceled, err := env.store.CancelRequested(ctx, "done"); err != nil || canceled {
		t.Errorf("CancelRequested after FinishJob = %v, %v; want the request removed with the plan", canceled, err)
	}
	entry, err := env.store.GetJobResultEntry(ctx, "done")
	if err != nil || entry.GetState() != hastorev1.JobResultState_JOB_RESULT_STATE_CLEAN || entry.GetResult().GetStatus() != res.GetStatus() {
		t.Errorf("result after FinishJob = %v, %v; want it clean and CANCELED", entry, err)
	}
	if _, err := env.store.GetExecutionPlan(ctx, "done"); !errors.Is(err, hastore.ErrPlanNotFound) {
		t.Errorf("plan after FinishJob: %v; want it removed", err)
	}

	dirty := &jobplanev1.JobResult{JobId: "again", Status: jobplanev1.JobStatus_JOB_STATUS_FAILED}
	if err := env.store.CreateDirtyJobResult(ctx, env.f, dirty); err != nil {
		t.Fatal(err)
	}
	if err := env.store.FinishJob(ctx, env.f, &jobplanev1.JobResult{JobId: "again", Status: jobplanev1.JobStatus_JOB_STATUS_FINISHED}); !errors.Is(err, hastore.ErrResultExists) {
		t.Errorf("FinishJob over a result: %v; want ErrResultExists", err)
	}
	if entry, err := env.store.GetJobResultEntry(ctx, "again"); err != nil || entry.GetState() != hastorev1.JobResultState_JOB_RESULT_STATE_DIRTY || entry.GetResult().GetStatus() != dirty.GetStatus() {
		t.Errorf("result after a refused FinishJob = %v, %v; want the dirty one untouched", entry, err)
	}
	if _, err := env.store.GetExecutionPlan(ctx, "again"); err != nil {
		t.Errorf("plan after a refused FinishJob: %v; want it kept", err)
	}

	stale := env.f
	stale.Token.Epoch--
	if err := env.store.FinishJob(ctx, stale, &jobplanev1.JobResult{JobId: "stale", Status: jobplanev1.JobStatus_JOB_STATUS_FINISHED}); !errors.Is(err, hastore.ErrStaleToken) {
		t.Errorf("FinishJob with a stale token: %v; want ErrStaleToken", err)
	}
	if _, err := env.store.GetJobResultEntry(ctx, "stale"); !errors.Is(err, hastore.ErrResultNotFound) {
		t.Errorf("result after a stale FinishJob: %v; want none", err)
	}
	if _, err := env.store.GetExecutionPlan(ctx, "stale"); err != nil {
		t.Errorf("plan after a stale FinishJob: %v; want it kept", err)
	}
}

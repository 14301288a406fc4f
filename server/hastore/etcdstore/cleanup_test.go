package etcdstore_test

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/hastore/etcdmember"
)

// A clean result whose plan is back (written beside the store, as a store
// of contract 1.1 could have left it) is not deleted: the transaction that
// would delete it finds the plan. Through the store's own writes a clean
// result never has a plan (storetest's ResultCleanAfterThePlan checks the
// mark), so only a write beside the store can set this up.
func TestDeleteResultRefusedWhilePlanExists(t *testing.T) {
	t.Parallel()
	e := startEmbedded(t, etcdmember.Config{})
	env, ctx := newPlanLeadEnvOn(t, e, "/cl/")
	if err := env.store.PutExecutionPlan(ctx, env.f, testPlan("j")); err != nil {
		t.Fatal(err)
	}
	if err := env.store.CreateDirtyJobResult(ctx, env.f, &jobplanev1.JobResult{JobId: "j", Status: jobplanev1.JobStatus_JOB_STATUS_FINISHED}); err != nil {
		t.Fatal(err)
	}
	if err := env.store.DeleteExecutionPlan(ctx, env.f, "j"); err != nil {
		t.Fatal(err)
	}
	if err := env.store.MarkJobResultClean(ctx, env.f, "j"); err != nil {
		t.Fatal(err)
	}
	data, err := proto.Marshal(testPlan("j"))
	if err != nil {
		t.Fatal(err)
	}
	c := etcdClient(t, e.member.Endpoint())
	if _, err := c.Put(ctx, "/cl/plans/j", string(data)); err != nil {
		t.Fatal(err)
	}
	if err := env.store.DeleteJobResultEntry(ctx, env.f, "j"); !errors.Is(err, hastore.ErrPlanNotDeleted) {
		t.Errorf("DeleteJobResultEntry of a clean result whose plan exists: err = %v, want %v", err, hastore.ErrPlanNotDeleted)
	}
	if entry, err := env.store.GetJobResultEntry(ctx, "j"); err != nil || entry.GetState() != hastorev1.JobResultState_JOB_RESULT_STATE_CLEAN {
		t.Errorf("entry after the refused delete = %v, %v; want it kept, clean", entry, err)
	}
}

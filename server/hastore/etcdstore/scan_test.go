package etcdstore_test

import (
	"fmt"
	"testing"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/server/hastore/etcdmember"
	"github.com/jobplane/jobplane/server/hastore/etcdstore"
)

// A listing that takes several etcd reads is still one snapshot: plans
// put and deleted between two of its reads do not show, so it never lists
// a state that never existed (here: a, b, c, d and e, when the store held
// a, c and e, then c and e, then b, c, d and e). Its third read too reads
// the first one's revision (an etcd response names the store's current
// revision, not the one read).
func TestListingIsOneSnapshot(t *testing.T) {
	t.Parallel()
	e := startEmbedded(t, etcdmember.Config{})
	env, ctx := newPlanLeadEnvOn(t, e, "/snap/")
	for _, id := range []string{"a", "c", "e"} {
		if err := env.store.PutExecutionPlan(ctx, env.f, testPlan(id)); err != nil {
			t.Fatal(err)
		}
	}
	ids, err := etcdstore.ListPlansInBatches(ctx, env.store, 1, func(id string) {
		if id != "a" {
			return
		}
		// a ends (its result, then its plan deleted), then b is put.
		if err := env.store.CreateDirtyJobResult(ctx, env.f, &jobplanev1.JobResult{JobId: "a", Status: jobplanev1.JobStatus_JOB_STATUS_FINISHED}); err != nil {
			t.Fatal(err)
		}
		if err := env.store.DeleteExecutionPlan(ctx, env.f, "a"); err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"b", "d"} {
			if err := env.store.PutExecutionPlan(ctx, env.f, testPlan(id)); err != nil {
				t.Fatal(err)
			}
		}
	})
	if err != nil || fmt.Sprint(ids) != "[a c e]" {
		t.Errorf("listing while a was replaced by b and d = %v, %v; want [a c e], the state when the listing began (the store never held a and d at once)", ids, err)
	}
}

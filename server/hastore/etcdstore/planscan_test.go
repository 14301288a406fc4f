package etcdstore_test

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/hastore/etcdstore"
)

// ScanExecutionPlans reads the plans a page at a time in job id order,
// each with its cancel request (those of other jobs, before, inside and
// after the page, go to their own jobs only), as GetExecutionPlan and
// Cancellation read them one job at a time.
func TestScanExecutionPlans(t *testing.T) {
	t.Parallel()
	env, ctx := newPlanLeadEnv(t, "/scan/")
	var ids []string
	for i := range 150 { // more than a read's batch of plans
		id := fmt.Sprintf("job-%03d", i)
		ids = append(ids, id)
		if err := env.store.PutExecutionPlan(ctx, env.f, testPlan(id)); err != nil {
			t.Fatal(err)
		}
	}
	canceled := map[string]bool{"job-000": true, "job-069": true, "job-070": true, "job-149": true}
	for id := range canceled {
		if err := env.store.RequestCancel(ctx, env.f, id, &jobplanev1.Cancellation{RequestId: "r-" + id}); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for after := ""; ; {
		page, err := env.store.ScanExecutionPlans(ctx, after, 70)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) > 70 {
			t.Fatalf("a page of %d plans, over its limit of 70", len(page))
		}
		for _, p := range page {
			got = append(got, p.Plan.GetJobId())
			checkStoredPlan(ctx, t, env.store, p, canceled)
		}
		if len(page) < 70 {
			break
		}
		after = page[len(page)-1].Plan.GetJobId()
	}
	if fmt.Sprint(got) != fmt.Sprint(ids) {
		t.Errorf("scanned %v; want every plan once, in id order: %v", got, ids)
	}
	if all, err := env.store.ScanExecutionPlans(ctx, "", 0); err != nil || len(all) != len(ids) {
		t.Errorf("a scan without a limit: %d plans, %v; want %d", len(all), err, len(ids))
	}
}

// ReadExecutionPlans reads the plans of the jobs it is given, across
// several transactions, each with its own cancel request, and leaves out
// the jobs without a plan; an invalid id fails the call.
func TestReadExecutionPlans(t *testing.T) {
	t.Parallel()
	env, ctx := newPlanLeadEnv(t, "/read/")
	var ids []string
	for i := range 150 { // more than one transaction's jobs
		id := fmt.Sprintf("job-%03d", i)
		if i%3 != 0 { // every third job has no plan
			if err := env.store.PutExecutionPlan(ctx, env.f, testPlan(id)); err != nil {
				t.Fatal(err)
			}
		}
		ids = append(ids, id)
	}
	canceled := map[string]bool{"job-001": true, "job-064": true, "job-065": true, "job-149": true}
	for id := range canceled {
		if err := env.store.RequestCancel(ctx, env.f, id, &jobplanev1.Cancellation{RequestId: "r-" + id}); err != nil {
			t.Fatal(err)
		}
	}
	read, err := env.store.ReadExecutionPlans(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, p := range read {
		got[p.Plan.GetJobId()] = true
		checkStoredPlan(ctx, t, env.store, p, canceled)
	}
	for i, id := range ids {
		if got[id] != (i%3 != 0) {
			t.Errorf("job %s read: %v; want %v (only the jobs with a plan)", id, got[id], i%3 != 0)
		}
	}
	if len(read) != 100 {
		t.Errorf("read %d plans; want 100, each once", len(read))
	}
	if _, err := env.store.ReadExecutionPlans(ctx, []string{"job-001", ""}); err == nil {
		t.Error("an empty job id was read; want an error")
	}
}

// checkStoredPlan checks a plan read with its cancel request against the
// plan GetExecutionPlan reads, and the request against the jobs canceled
// (each with the request "r-<job id>").
func checkStoredPlan(ctx context.Context, t *testing.T, store *etcdstore.Store, p hastore.StoredPlan, canceled map[string]bool) {
	t.Helper()
	id := p.Plan.GetJobId()
	want, err := store.GetExecutionPlan(ctx, id)
	if err != nil || !proto.Equal(want, p.Plan) {
		t.Errorf("plan of %s: %v; want it as GetExecutionPlan reads it (%v)", id, p.Plan, err)
	}
	switch c := p.Cancellation; {
	case canceled[id] && c.GetRequestId() != "r-"+id:
		t.Errorf("cancel request of %s = %v; want its own, r-%s", id, c, id)
	case !canceled[id] && c != nil:
		t.Errorf("cancel request of %s = %v; want none", id, c)
	}
}

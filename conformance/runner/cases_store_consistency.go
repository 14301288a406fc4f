package runner

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	"github.com/jobplane/jobplane/gen/jobplane/hastore/v1/hastorev1connect"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
)

// storeConsistencyCases check HAStoreService's Consistency (since 1.2):
// reads are linearizable, and a page of a listing is one snapshot.
var storeConsistencyCases = []Case{
	{
		Name: "store/reads-see-acknowledged-writes",
		Doc:  "20 times: a plan put, a result created and the plan deleted through one connection, each read back at once through another (Get and List of plans and results, read before the write too): every read reflects every write acknowledged before it was sent; and after a Resign, GetLeader and ObserveLeader's first answer show the leadership gone",
		Run:  storeReadsSeeAcknowledgedWrites,
	},
	{
		Name: "store/listings-are-snapshots",
		Doc:  "while jobs run one at a time through put plan, create result, delete plan, listings of plans then results (through another connection) never list two plans, and list every job whose plan put was acknowledged before them as a plan or a result",
		Run:  storeListingsAreSnapshots,
	},
}

// readerRPC returns a client of the store on an HTTP client of its own,
// so that its calls travel on other connections than t.store.rpc()'s.
func (t *T) readerRPC() hastorev1connect.HAStoreServiceClient {
	hc := newHTTPClient("", t.store.wire.rootCAs)
	t.Cleanup(hc.CloseIdleConnections)
	return hastorev1connect.NewHAStoreServiceClient(hc, t.store.url(), t.store.wire.options()...)
}

// storeRounds is how many jobs storeReadsSeeAcknowledgedWrites writes and
// reads back.
const storeRounds = 20

func storeReadsSeeAcknowledgedWrites(t *T) {
	fence := t.storeDispatcher()
	writer, reader := t.store.rpc(), t.readerRPC()
	ctx, cancel := context.WithTimeout(t.ctx, 60*time.Second)
	defer cancel()
	planVisible := func(id string) (got bool, listed bool) {
		_, err := reader.GetExecutionPlan(ctx, &hastorev1.GetExecutionPlanRequest{JobId: id})
		if err != nil && connect.CodeOf(err) != connect.CodeNotFound {
			t.Fatalf("GetExecutionPlan(%s): %v", id, err)
		}
		list, lerr := reader.ListExecutionPlans(ctx, &hastorev1.ListExecutionPlansRequest{})
		if lerr != nil {
			t.Fatalf("ListExecutionPlans: %v", lerr)
		}
		return err == nil, slices.Contains(list.GetJobIds(), id)
	}
	resultVisible := func(id string) (got bool, listed bool) {
		_, err := reader.GetJobResultEntry(ctx, &hastorev1.GetJobResultEntryRequest{JobId: id})
		if err != nil && connect.CodeOf(err) != connect.CodeNotFound {
			t.Fatalf("GetJobResultEntry(%s): %v", id, err)
		}
		list, lerr := reader.ListJobResultEntries(ctx, &hastorev1.ListJobResultEntriesRequest{})
		if lerr != nil {
			t.Fatalf("ListJobResultEntries: %v", lerr)
		}
		return err == nil, slices.ContainsFunc(list.GetEntries(), func(e *hastorev1.JobResultEntry) bool { return e.GetResult().GetJobId() == id })
	}
	expect := func(what string, got, listed, want bool) {
		if got != want || listed != want {
			t.Errorf("%s: read through another connection at once: found %v, listed %v; expected %v for both: a read reflects every write acknowledged before it was sent (HAStoreService, Consistency)", what, got, listed, want)
		}
	}
	for i := range storeRounds {
		id := fmt.Sprintf("read-%02d", i)
		// Each read before a write gives a store that caches answers
		// something to serve stale.
		got, listed := planVisible(id)
		expect("plan of "+id+" before its put", got, listed, false)
		plan := wirePlan(time.Now())
		plan.JobId = id
		if _, err := writer.PutExecutionPlan(ctx, &hastorev1.PutExecutionPlanRequest{Fence: fence, Plan: plan}); err != nil {
			t.Fatalf("PutExecutionPlan(%s): %v", id, err)
		}
		got, listed = planVisible(id)
		expect("plan of "+id+" after its put was acknowledged", got, listed, true)
		got, listed = resultVisible(id)
		expect("result of "+id+" before it was created", got, listed, false)
		res := &jobplanev1.JobResult{JobId: id, Status: jobplanev1.JobStatus_JOB_STATUS_FINISHED}
		if _, err := writer.CreateDirtyJobResult(ctx, &hastorev1.CreateDirtyJobResultRequest{Fence: fence, Result: res}); err != nil {
			t.Fatalf("CreateDirtyJobResult(%s): %v", id, err)
		}
		got, listed = resultVisible(id)
		expect("result of "+id+" after it was created", got, listed, true)
		if _, err := writer.DeleteExecutionPlan(ctx, &hastorev1.DeleteExecutionPlanRequest{Fence: fence, JobId: id}); err != nil {
			t.Fatalf("DeleteExecutionPlan(%s): %v", id, err)
		}
		got, listed = planVisible(id)
		expect("plan of "+id+" after its delete was acknowledged", got, listed, false)
		if t.failed() {
			break // one stale round tells enough; the leader entry is checked still
		}
	}
	// The leader entry: a Resign acknowledged is seen by GetLeader and by
	// ObserveLeader's first answer.
	before, err := reader.GetLeader(ctx, &hastorev1.GetLeaderRequest{Election: election.JobManager})
	if err != nil || before.GetLeader().GetToken().GetEpoch() != fence.GetToken().GetEpoch() {
		t.Fatalf("GetLeader before the Resign = %v, %v; expected the case's leadership %v", before.GetLeader(), err, fence.GetToken())
	}
	if _, err := writer.Resign(ctx, &hastorev1.ResignRequest{Fence: fence}); err != nil {
		t.Fatalf("Resign: %v", err)
	}
	after, err := reader.GetLeader(ctx, &hastorev1.GetLeaderRequest{Election: election.JobManager})
	if err != nil || after.GetLeader().GetToken().GetEpoch() == fence.GetToken().GetEpoch() {
		t.Errorf("GetLeader after the Resign was acknowledged = %v, %v; expected the resigned leadership gone (HAStoreService, Consistency)", after.GetLeader(), err)
	}
	octx, ocancel := context.WithTimeout(ctx, 10*time.Second)
	defer ocancel()
	stream, err := reader.ObserveLeader(octx, &hastorev1.ObserveLeaderRequest{Election: election.JobManager})
	if err != nil {
		t.Fatalf("ObserveLeader: %v", err)
	}
	defer stream.Close()
	for stream.Receive() {
		if l, ok := stream.Msg().GetEvent().(*hastorev1.ObserveLeaderResponse_Leader); ok {
			if l.Leader.GetToken().GetEpoch() == fence.GetToken().GetEpoch() {
				t.Errorf("ObserveLeader's first answer after the Resign was acknowledged = %v; expected the resigned leadership gone (HAStoreService, Consistency)", l.Leader)
			}
			return
		}
	}
	t.Errorf("ObserveLeader ended (%v) without an answer; expected the election's current leader first", stream.Err())
}

// snapshotJobs bounds storeListingsAreSnapshots: at most this many jobs,
// for at most snapshotFor.
const (
	snapshotJobs = 100
	snapshotFor  = 4 * time.Second
)

func storeListingsAreSnapshots(t *T) {
	fence := t.storeDispatcher()
	writer, reader := t.store.rpc(), t.readerRPC()
	ctx, cancel := context.WithTimeout(t.ctx, 60*time.Second)
	defer cancel()
	id := func(i int) string { return fmt.Sprintf("snap-%03d", i) }
	var acked atomic.Int64 // jobs whose plan put was acknowledged
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(done)
		deadline := time.Now().Add(snapshotFor)
		for i := 0; i < snapshotJobs && time.Now().Before(deadline) && !t.failed(); i++ {
			plan := wirePlan(time.Now())
			plan.JobId = id(i)
			if _, err := writer.PutExecutionPlan(ctx, &hastorev1.PutExecutionPlanRequest{Fence: fence, Plan: plan}); err != nil {
				t.Errorf("PutExecutionPlan(%s): %v", id(i), err)
				return
			}
			acked.Store(int64(i + 1))
			res := &jobplanev1.JobResult{JobId: id(i), Status: jobplanev1.JobStatus_JOB_STATUS_FINISHED}
			if _, err := writer.CreateDirtyJobResult(ctx, &hastorev1.CreateDirtyJobResultRequest{Fence: fence, Result: res}); err != nil {
				t.Errorf("CreateDirtyJobResult(%s): %v", id(i), err)
				return
			}
			if _, err := writer.DeleteExecutionPlan(ctx, &hastorev1.DeleteExecutionPlanRequest{Fence: fence, JobId: id(i)}); err != nil {
				t.Errorf("DeleteExecutionPlan(%s): %v", id(i), err)
				return
			}
		}
	})
	defer wg.Wait()
	for last := false; !last && !t.failed(); {
		select {
		case <-done:
			last = true // one listing after the last write
		default:
		}
		n := int(acked.Load())
		plans, err := reader.ListExecutionPlans(ctx, &hastorev1.ListExecutionPlansRequest{PageSize: 1000})
		if err != nil {
			t.Fatalf("ListExecutionPlans: %v", err)
		}
		results, err := reader.ListJobResultEntries(ctx, &hastorev1.ListJobResultEntriesRequest{PageSize: 1000})
		if err != nil {
			t.Fatalf("ListJobResultEntries: %v", err)
		}
		if ids := plans.GetJobIds(); len(ids) > 1 {
			t.Errorf("ListExecutionPlans listed %v while the store held one plan at a time; expected a page to be one snapshot (HAStoreService, Consistency)", ids)
		}
		var resulted []string
		for _, e := range results.GetEntries() {
			resulted = append(resulted, e.GetResult().GetJobId())
		}
		for i := range n {
			if !slices.Contains(plans.GetJobIds(), id(i)) && !slices.Contains(resulted, id(i)) {
				t.Errorf("job %s, whose plan put was acknowledged before the listings were sent, is neither in ListExecutionPlans %v nor in the ListJobResultEntries that followed (%d results); expected it in one: a plan is deleted only once its result exists, and reads are linearizable", id(i), plans.GetJobIds(), len(resulted))
				break
			}
		}
	}
}

package runner

import (
	"context"
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
)

// storeWireCases check the store's answers on the wire, as a client in any
// language sees them: repeated creates (AIP-155) in another encoding, and
// the ErrorInfo of each refusal.
var storeWireCases = []Case{
	{
		Name: "store/fence-without-token",
		Doc:  "a plan or result write whose fence names the election but carries no token is INVALID_ARGUMENT and writes nothing",
		Run:  storeFenceWithoutToken,
	},
	{
		Name: "store/concurrent-stale-writes",
		Doc:  "32 plan puts at once, half under the current token and half under a resigned one: every stale put is refused and writes nothing, every current one succeeds",
		Run:  storeConcurrentStaleWrites,
	},
	{
		Name: "store/list-pages",
		Doc:  "plans and results listed a page at a time on the wire (pages of 1 and 2): every id once, in order, each next_page_token leading to the next page, empty only on the last",
		Run:  storeListPages,
	},
	{
		Name: "store/campaign-repeated",
		Doc:  "a Campaign repeated as after a lost answer (same session, election and address) succeeds and leaves one candidacy; one with another address is ALREADY_EXISTS (CANDIDACY_EXISTS)",
		Run:  storeCampaignRepeated,
	},
	{
		Name: "store/plan-repeated-in-json",
		Doc:  "a PutExecutionPlan repeated in JSON (fields and map entries in another order, a default value set explicitly) succeeds and changes nothing; another plan for the job is ALREADY_EXISTS (EXECUTION_PLAN_EXISTS)",
		Run:  storePlanRepeatedInJSON,
	},
	{
		Name: "store/result-repeated-in-json",
		Doc:  "a CreateDirtyJobResult repeated in JSON succeeds and changes nothing; another result for the job is ALREADY_EXISTS (JOB_RESULT_EXISTS)",
		Run:  storeResultRepeatedInJSON,
	},
	{
		Name: "store/watch-session-snapshot",
		Doc:  "WatchSession starts with a granted event for each leadership the session holds, then snapshot_end; a leadership resigned in between is missing from the next snapshot",
		Run:  storeWatchSessionSnapshot,
	},
	{
		Name: "store/plan-delete-needs-result",
		Doc:  "DeleteExecutionPlan of a job without a result entry is NOT_FOUND (JOB_RESULT_NOT_FOUND) and deletes nothing; with one, it deletes the plan",
		Run:  storePlanDeleteNeedsResult,
	},
}

// storeSession opens a session on the store, closed when the case ends.
func (t *T) storeSession() string {
	ctx, cancel := context.WithTimeout(t.ctx, 10*time.Second)
	defer cancel()
	resp, err := t.store.rpc().OpenSession(ctx, &hastorev1.OpenSessionRequest{Ttl: durationpb.New(30 * time.Second)})
	if err != nil {
		t.Fatalf("OpenSession: %v; expected a session", err)
	}
	id := resp.GetSessionId()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = t.store.rpc().CloseSession(ctx, &hastorev1.CloseSessionRequest{SessionId: id})
	})
	return id
}

// storeLeader waits up to 20s for session to lead election, and returns
// its fence.
func (t *T) storeLeader(election, session string) *jobplanev1.Fence {
	var last *jobplanev1.LeaderInfo
	var fence *jobplanev1.Fence
	if !t.wait(20*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(t.ctx, 5*time.Second)
		defer cancel()
		resp, err := t.store.rpc().GetLeader(ctx, &hastorev1.GetLeaderRequest{Election: election})
		last = resp.GetLeader()
		if err != nil || last.GetToken().GetSessionId() != session {
			return false
		}
		fence = &jobplanev1.Fence{Election: election, Token: last.GetToken()}
		return true
	}) {
		t.Fatalf("GetLeader(%s) = %v within 20s; expected session %s, the only candidate, to lead", election, last, session)
	}
	return fence
}

// storeDispatcher makes the case the leader of `jobmanager`, whose token
// covers plans and results, and returns its fence.
func (t *T) storeDispatcher() *jobplanev1.Fence {
	session := t.storeSession()
	ctx, cancel := context.WithTimeout(t.ctx, 10*time.Second)
	defer cancel()
	if _, err := t.store.rpc().Campaign(ctx, &hastorev1.CampaignRequest{Election: election.JobManager, SessionId: session}); err != nil {
		t.Fatalf("Campaign(%s): %v; expected the candidacy entered", election.JobManager, err)
	}
	return t.storeLeader(election.JobManager, session)
}

// postJSON calls a store method with a hand-written JSON body, in the
// JSON form of the runner's protocol, and returns the call's error.
func (t *T) postJSON(method, body string) error {
	ctx, cancel := context.WithTimeout(t.ctx, 10*time.Second)
	defer cancel()
	call := connect.NewClient[emptypb.Empty, emptypb.Empty](t.store.http, t.store.url()+"/jobplane.hastore.v1.HAStoreService/"+method,
		append(t.store.wire.options(), connect.WithCodec(rawJSON(body)))...)
	_, err := call.CallUnary(ctx, connect.NewRequest(&emptypb.Empty{}))
	return err
}

// fenceJSON is f in the JSON form, its fields in reverse order.
func fenceJSON(f *jobplanev1.Fence) string {
	return fmt.Sprintf(`{"token": {"epoch": "%d", "sessionId": %q}, "election": %q}`, f.GetToken().GetEpoch(), f.GetToken().GetSessionId(), f.GetElection())
}

func storeCampaignRepeated(t *T) {
	session := t.storeSession()
	rpc := t.store.rpc()
	campaign := func(address string) error {
		ctx, cancel := context.WithTimeout(t.ctx, 10*time.Second)
		defer cancel()
		_, err := rpc.Campaign(ctx, &hastorev1.CampaignRequest{Election: election.JobManager, SessionId: session, Address: address})
		return err
	}
	if err := campaign("http://127.0.0.1:1"); err != nil {
		t.Fatalf("Campaign: %v; expected the candidacy entered", err)
	}
	if err := campaign("http://127.0.0.1:1"); err != nil {
		t.Errorf("Campaign repeated with the same address: %v; expected OK, the first call's success (AIP-155)", err)
	}
	fence := t.storeLeader(election.JobManager, session)
	if err := campaign("http://127.0.0.1:2"); connect.CodeOf(err) != connect.CodeAlreadyExists || reason(err) != "CANDIDACY_EXISTS" {
		t.Errorf("Campaign with another address: %s; expected ALREADY_EXISTS (CANDIDACY_EXISTS)", codeAndReason(err))
	}
	// One candidacy: once it resigns, the election has no leader.
	ctx, cancel := context.WithTimeout(t.ctx, 10*time.Second)
	defer cancel()
	if _, err := rpc.Resign(ctx, &hastorev1.ResignRequest{Fence: fence}); err != nil {
		t.Fatalf("Resign: %v", err)
	}
	var last *jobplanev1.LeaderInfo
	if !t.wait(5*time.Second, func() bool {
		resp, err := rpc.GetLeader(ctx, &hastorev1.GetLeaderRequest{Election: election.JobManager})
		last = resp.GetLeader()
		return err == nil && last.GetToken() == nil
	}) {
		t.Errorf("GetLeader after the only grant resigned = %v; expected no leader: the repeated Campaign entered a second candidacy", last)
	}
}

// wirePlan is the plan of storePlanRepeatedInJSON, and planJSON the same
// plan in JSON: fields and map entries in another order, and the unset
// vertex name and restart count of the binary form set to their defaults.
func wirePlan(submit time.Time) *hastorev1.ExecutionPlan {
	return &hastorev1.ExecutionPlan{
		JobId: "wire",
		JobGraph: &jobplanev1.JobGraph{
			Name: "wire",
			Vertices: []*jobplanev1.JobVertex{
				{Id: "a", Invokable: "noop", Parallelism: 2, Config: map[string]string{"x": "1", "y": "2", "z": "3"}},
				{Id: "b", Invokable: "noop", Parallelism: 1},
			},
			Edges: []*jobplanev1.JobEdge{{SourceVertexId: "a", TargetVertexId: "b"}},
		},
		Digest:     []byte{1, 2, 3},
		SubmitTime: timestamppb.New(submit),
	}
}

func planJSON(f *jobplanev1.Fence, submit time.Time) string {
	return fmt.Sprintf(`{"plan": {"submitTime": %q, "digest": "AQID", "jobGraph": {
		"edges": [{"targetVertexId": "b", "sourceVertexId": "a"}],
		"vertices": [
			{"parallelism": 2, "config": {"z": "3", "x": "1", "y": "2"}, "invokable": "noop", "id": "a"},
			{"maxParallelism": 0, "name": "", "parallelism": 1, "invokable": "noop", "id": "b"}],
		"name": "wire"}, "jobId": "wire"}, "fence": %s}`, submit.UTC().Format(time.RFC3339Nano), fenceJSON(f))
}

func storePlanRepeatedInJSON(t *T) {
	fence := t.storeDispatcher()
	rpc := t.store.rpc()
	ctx, cancel := context.WithTimeout(t.ctx, 20*time.Second)
	defer cancel()
	submit := time.Now().Truncate(time.Millisecond)
	plan := wirePlan(submit)
	if _, err := rpc.PutExecutionPlan(ctx, &hastorev1.PutExecutionPlanRequest{Fence: fence, Plan: plan}); err != nil {
		t.Fatalf("PutExecutionPlan: %v; expected the plan stored", err)
	}
	if err := t.postJSON("PutExecutionPlan", planJSON(fence, submit)); err != nil {
		t.Errorf("PutExecutionPlan of the same plan in JSON: %v; expected OK: the same plan, encoded otherwise, is a repetition", err)
	}
	other := proto.CloneOf(plan)
	other.JobGraph.Vertices[0].Parallelism = 3
	_, err := rpc.PutExecutionPlan(ctx, &hastorev1.PutExecutionPlanRequest{Fence: fence, Plan: other})
	if connect.CodeOf(err) != connect.CodeAlreadyExists || reason(err) != "EXECUTION_PLAN_EXISTS" {
		t.Errorf("PutExecutionPlan of another plan for the job: %s; expected ALREADY_EXISTS (EXECUTION_PLAN_EXISTS)", codeAndReason(err))
	}
	got, err := rpc.GetExecutionPlan(ctx, &hastorev1.GetExecutionPlanRequest{JobId: "wire"})
	if err != nil || !proto.Equal(got.GetPlan(), plan) {
		t.Errorf("GetExecutionPlan = %v, %v; expected the first plan, unchanged", got.GetPlan(), err)
	}
}

func storeResultRepeatedInJSON(t *T) {
	fence := t.storeDispatcher()
	rpc := t.store.rpc()
	ctx, cancel := context.WithTimeout(t.ctx, 20*time.Second)
	defer cancel()
	end := time.Now().Truncate(time.Millisecond)
	res := &jobplanev1.JobResult{
		JobId: "wire", Status: jobplanev1.JobStatus_JOB_STATUS_FAILED, EndTime: timestamppb.New(end), Name: "wire",
		Failure: &jobplanev1.FailureInfo{Message: "boom", TaskExecutorId: "te-1"}, RestartCount: 2, PlanDigest: []byte{1, 2, 3},
	}
	if _, err := rpc.CreateDirtyJobResult(ctx, &hastorev1.CreateDirtyJobResultRequest{Fence: fence, Result: res}); err != nil {
		t.Fatalf("CreateDirtyJobResult: %v; expected the result stored", err)
	}
	body := fmt.Sprintf(`{"result": {"planDigest": "AQID", "restartCount": 2, "failure": {"taskExecutorId": "te-1", "message": "boom"},
		"name": "wire", "endTime": %q, "status": "JOB_STATUS_FAILED", "jobId": "wire", "exceptionHistory": []}, "fence": %s}`,
		end.UTC().Format(time.RFC3339Nano), fenceJSON(fence))
	if err := t.postJSON("CreateDirtyJobResult", body); err != nil {
		t.Errorf("CreateDirtyJobResult of the same result in JSON: %v; expected OK: a repetition of the call that created it", err)
	}
	other := proto.CloneOf(res)
	other.RestartCount = 3
	_, err := rpc.CreateDirtyJobResult(ctx, &hastorev1.CreateDirtyJobResultRequest{Fence: fence, Result: other})
	if connect.CodeOf(err) != connect.CodeAlreadyExists || reason(err) != "JOB_RESULT_EXISTS" {
		t.Errorf("CreateDirtyJobResult of another result for the job: %s; expected ALREADY_EXISTS (JOB_RESULT_EXISTS)", codeAndReason(err))
	}
	got, err := rpc.GetJobResultEntry(ctx, &hastorev1.GetJobResultEntryRequest{JobId: "wire"})
	if err != nil || !proto.Equal(got.GetEntry().GetResult(), res) || got.GetEntry().GetState() != hastorev1.JobResultState_JOB_RESULT_STATE_DIRTY {
		t.Errorf("GetJobResultEntry = %v, %v; expected the first result, dirty", got.GetEntry(), err)
	}
}

func storePlanDeleteNeedsResult(t *T) {
	fence := t.storeDispatcher()
	rpc := t.store.rpc()
	ctx, cancel := context.WithTimeout(t.ctx, 20*time.Second)
	defer cancel()
	plan := wirePlan(time.Now())
	if _, err := rpc.PutExecutionPlan(ctx, &hastorev1.PutExecutionPlanRequest{Fence: fence, Plan: plan}); err != nil {
		t.Fatalf("PutExecutionPlan: %v; expected the plan stored", err)
	}
	_, err := rpc.DeleteExecutionPlan(ctx, &hastorev1.DeleteExecutionPlanRequest{Fence: fence, JobId: "wire"})
	if connect.CodeOf(err) != connect.CodeNotFound || reason(err) != "JOB_RESULT_NOT_FOUND" {
		t.Errorf("DeleteExecutionPlan of a job without a result: %s; expected NOT_FOUND (JOB_RESULT_NOT_FOUND)", codeAndReason(err))
	}
	if _, err := rpc.GetExecutionPlan(ctx, &hastorev1.GetExecutionPlanRequest{JobId: "wire"}); err != nil {
		t.Errorf("GetExecutionPlan after the refused delete: %v; expected the plan kept", err)
	}
	res := &jobplanev1.JobResult{JobId: "wire", Status: jobplanev1.JobStatus_JOB_STATUS_FINISHED}
	if _, err := rpc.CreateDirtyJobResult(ctx, &hastorev1.CreateDirtyJobResultRequest{Fence: fence, Result: res}); err != nil {
		t.Fatalf("CreateDirtyJobResult: %v; expected the result stored", err)
	}
	if _, err := rpc.DeleteExecutionPlan(ctx, &hastorev1.DeleteExecutionPlanRequest{Fence: fence, JobId: "wire"}); err != nil {
		t.Errorf("DeleteExecutionPlan of a job with a result: %s; expected OK", codeAndReason(err))
	}
	if _, err := rpc.GetExecutionPlan(ctx, &hastorev1.GetExecutionPlanRequest{JobId: "wire"}); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("GetExecutionPlan after the delete: %s; expected NOT_FOUND", codeAndReason(err))
	}
}

// snapshotOf reads a WatchSession stream up to its snapshot_end and
// returns the elections granted in the snapshot.
func (t *T) snapshotOf(session string) []string {
	ctx, cancel := context.WithTimeout(t.ctx, 20*time.Second)
	defer cancel()
	stream, err := t.store.rpc().WatchSession(ctx, &hastorev1.WatchSessionRequest{SessionId: session})
	if err != nil {
		t.Fatalf("WatchSession: %v", err)
	}
	defer stream.Close()
	var granted []string
	for stream.Receive() {
		switch ev := stream.Msg().GetEvent().(type) {
		case *hastorev1.WatchSessionResponse_Granted:
			granted = append(granted, ev.Granted.GetElection())
		case *hastorev1.WatchSessionResponse_SnapshotEnd_:
			return granted
		case *hastorev1.WatchSessionResponse_Revoked:
			t.Fatalf("WatchSession sent %v before snapshot_end; expected the snapshot's granted events, then snapshot_end", ev)
		}
	}
	t.Fatalf("WatchSession ended (%v) without snapshot_end after granted %v; expected snapshot_end to follow the snapshot", stream.Err(), granted)
	return nil
}

func storeWatchSessionSnapshot(t *T) {
	session := t.storeSession()
	if got := t.snapshotOf(session); len(got) != 0 {
		t.Errorf("snapshot of a session without leaderships = %v; expected it empty", got)
	}
	ctx, cancel := context.WithTimeout(t.ctx, 20*time.Second)
	defer cancel()
	if _, err := t.store.rpc().Campaign(ctx, &hastorev1.CampaignRequest{Election: election.JobManager, SessionId: session}); err != nil {
		t.Fatalf("Campaign: %v", err)
	}
	fence := t.storeLeader(election.JobManager, session)
	if got := t.snapshotOf(session); fmt.Sprint(got) != "["+election.JobManager+"]" {
		t.Errorf("snapshot of a session leading %s = %v; expected exactly that leadership", election.JobManager, got)
	}
	if _, err := t.store.rpc().Resign(ctx, &hastorev1.ResignRequest{Fence: fence}); err != nil {
		t.Fatalf("Resign: %v", err)
	}
	if got := t.snapshotOf(session); len(got) != 0 {
		t.Errorf("snapshot after the leadership was resigned = %v; expected it empty, so a reconnecting client learns the leadership ended", got)
	}
}

// storeListPages lists plans and results a page at a time on the wire:
// every id once, in order, each page's token leading to the next, and
// an empty token only on the last page.
func storeListPages(t *T) {
	fence := t.storeDispatcher()
	rpc := t.store.rpc()
	ctx, cancel := context.WithTimeout(t.ctx, 20*time.Second)
	defer cancel()
	ids := []string{"page-a", "page-b", "page-c"}
	for _, id := range ids {
		plan := wirePlan(time.Now())
		plan.JobId = id
		if _, err := rpc.PutExecutionPlan(ctx, &hastorev1.PutExecutionPlanRequest{Fence: fence, Plan: plan}); err != nil {
			t.Fatalf("PutExecutionPlan(%s): %v; expected the plan stored", id, err)
		}
		res := &jobplanev1.JobResult{JobId: id, Status: jobplanev1.JobStatus_JOB_STATUS_FINISHED}
		if _, err := rpc.CreateDirtyJobResult(ctx, &hastorev1.CreateDirtyJobResultRequest{Fence: fence, Result: res}); err != nil {
			t.Fatalf("CreateDirtyJobResult(%s): %v; expected the result stored", id, err)
		}
	}
	for _, size := range []int32{1, 2} {
		var plans, results []string
		token := ""
		for range 10 {
			resp, err := rpc.ListExecutionPlans(ctx, &hastorev1.ListExecutionPlansRequest{PageSize: size, PageToken: token})
			if err != nil {
				t.Fatalf("ListExecutionPlans: %v", err)
			}
			plans = append(plans, resp.GetJobIds()...)
			if token = resp.GetNextPageToken(); token == "" {
				break
			}
		}
		token = ""
		for range 10 {
			resp, err := rpc.ListJobResultEntries(ctx, &hastorev1.ListJobResultEntriesRequest{PageSize: size, PageToken: token})
			if err != nil {
				t.Fatalf("ListJobResultEntries: %v", err)
			}
			for _, e := range resp.GetEntries() {
				results = append(results, e.GetResult().GetJobId())
			}
			if token = resp.GetNextPageToken(); token == "" {
				break
			}
		}
		if fmt.Sprint(plans) != fmt.Sprint(ids) {
			t.Errorf("ListExecutionPlans by pages of %d listed %v; expected %v, every id once in order, each page's next_page_token leading to the next", size, plans, ids)
		}
		if fmt.Sprint(results) != fmt.Sprint(ids) {
			t.Errorf("ListJobResultEntries by pages of %d listed %v; expected %v, every entry once in order, each page's next_page_token leading to the next", size, results, ids)
		}
	}
}

// storeFenceWithoutToken writes a plan and a result with a fence that
// names the election but carries no token: INVALID_ARGUMENT, and nothing
// written.
func storeFenceWithoutToken(t *T) {
	t.storeDispatcher() // the election has a leader whose token a store might take
	rpc := t.store.rpc()
	ctx, cancel := context.WithTimeout(t.ctx, 20*time.Second)
	defer cancel()
	fence := &jobplanev1.Fence{Election: election.JobManager}
	_, err := rpc.PutExecutionPlan(ctx, &hastorev1.PutExecutionPlanRequest{Fence: fence, Plan: wirePlan(time.Now())})
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("PutExecutionPlan with a fence without a token: %s; expected INVALID_ARGUMENT", codeAndReason(err))
	}
	res := &jobplanev1.JobResult{JobId: "wire", Status: jobplanev1.JobStatus_JOB_STATUS_FINISHED}
	_, err = rpc.CreateDirtyJobResult(ctx, &hastorev1.CreateDirtyJobResultRequest{Fence: fence, Result: res})
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("CreateDirtyJobResult with a fence without a token: %s; expected INVALID_ARGUMENT", codeAndReason(err))
	}
	if _, err := rpc.GetExecutionPlan(ctx, &hastorev1.GetExecutionPlanRequest{JobId: "wire"}); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("GetExecutionPlan after the refused put: %s; expected NOT_FOUND, nothing written", codeAndReason(err))
	}
}

// storeConcurrentStaleWrites sends, at once, plan puts under the current
// token and under a resigned one: a store that batches writes must check
// each one's fence, so every stale put is refused and writes nothing.
func storeConcurrentStaleWrites(t *T) {
	session := t.storeSession()
	rpc := t.store.rpc()
	ctx, cancel := context.WithTimeout(t.ctx, 20*time.Second)
	defer cancel()
	campaign := func() *jobplanev1.Fence {
		if _, err := rpc.Campaign(ctx, &hastorev1.CampaignRequest{Election: election.JobManager, SessionId: session}); err != nil {
			t.Fatalf("Campaign: %v", err)
		}
		return t.storeLeader(election.JobManager, session)
	}
	stale := campaign()
	if _, err := rpc.Resign(ctx, &hastorev1.ResignRequest{Fence: stale}); err != nil {
		t.Fatalf("Resign: %v", err)
	}
	current := campaign()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var applied []string
	for i := range 32 {
		f, kind := current, "current"
		if i%2 == 1 {
			f, kind = stale, "stale"
		}
		id := fmt.Sprintf("concurrent-%s-%d", kind, i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			plan := wirePlan(time.Now())
			plan.JobId = id
			_, err := rpc.PutExecutionPlan(ctx, &hastorev1.PutExecutionPlanRequest{Fence: f, Plan: plan})
			if kind == "stale" && connect.CodeOf(err) != connect.CodeAborted {
				t.Errorf("a concurrent PutExecutionPlan under a resigned token: %s; expected ABORTED (STALE_FENCING_TOKEN)", codeAndReason(err))
			}
			if kind == "current" && err != nil {
				t.Errorf("a concurrent PutExecutionPlan under the current token: %s; expected OK", codeAndReason(err))
			}
			if _, gerr := rpc.GetExecutionPlan(ctx, &hastorev1.GetExecutionPlanRequest{JobId: id}); gerr == nil && kind == "stale" {
				mu.Lock()
				applied = append(applied, id)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(applied) > 0 {
		t.Errorf("plans %v were written under a resigned token; expected every stale write refused, batched with others or not", applied)
	}
}

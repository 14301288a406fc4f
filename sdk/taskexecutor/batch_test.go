package taskexecutor_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	"github.com/jobplane/jobplane/gen/jobplane/cluster/v1/clusterv1connect"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/taskexecutor"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
	"github.com/jobplane/jobplane/sdk/wire/transport"
)

// recordingJobMaster takes every registration and offer, and records the
// calls it gets. Without batch, it lacks UpdateTaskExecutionStates, as a
// JobMaster of another implementation may. hold, if set, holds the first
// state report until it is closed.
type recordingJobMaster struct {
	clusterv1connect.UnimplementedJobMasterServiceHandler
	batch bool
	hold  chan struct{}

	mu        sync.Mutex
	registers int // by RegisterTaskExecutor or by an offer
	separate  int // RegisterTaskExecutor calls
	offers    [][]*clusterv1.SlotOffer
	reports   [][]*jobplanev1.TaskExecutionStatus // one entry per call
	singles   int                                 // UpdateTaskExecutionState calls
	held      bool
	heldEnded bool // the held report call has returned
}

func (j *recordingJobMaster) RegisterTaskExecutor(context.Context, *clusterv1.JobMasterServiceRegisterTaskExecutorRequest) (*clusterv1.JobMasterServiceRegisterTaskExecutorResponse, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.registers++
	j.separate++
	return &clusterv1.JobMasterServiceRegisterTaskExecutorResponse{HeartbeatTimeout: durationpb.New(time.Minute), HeartbeatInterval: durationpb.New(time.Second)}, nil
}

func (j *recordingJobMaster) OfferSlots(_ context.Context, req *clusterv1.OfferSlotsRequest) (*clusterv1.OfferSlotsResponse, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.offers = append(j.offers, req.GetOffers())
	if req.GetAddress() != "" {
		j.registers++
	}
	return &clusterv1.OfferSlotsResponse{Accepted: req.GetOffers(), HeartbeatTimeout: durationpb.New(time.Minute), HeartbeatInterval: durationpb.New(time.Second)}, nil
}

func (j *recordingJobMaster) UpdateTaskExecutionState(_ context.Context, req *clusterv1.UpdateTaskExecutionStateRequest) (*clusterv1.UpdateTaskExecutionStateResponse, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.singles++
	j.reports = append(j.reports, []*jobplanev1.TaskExecutionStatus{req.GetStatus()})
	return &clusterv1.UpdateTaskExecutionStateResponse{}, nil
}

func (j *recordingJobMaster) UpdateTaskExecutionStates(ctx context.Context, req *clusterv1.UpdateTaskExecutionStatesRequest) (*clusterv1.UpdateTaskExecutionStatesResponse, error) {
	if !j.batch {
		return nil, connect.NewError(connect.CodeUnimplemented, nil)
	}
	j.mu.Lock()
	first := !j.held
	j.held = true
	j.mu.Unlock()
	if first && j.hold != nil {
		defer func() {
			j.mu.Lock()
			j.heldEnded = true
			j.mu.Unlock()
		}()
		select {
		case <-j.hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.reports = append(j.reports, req.GetStatuses())
	return &clusterv1.UpdateTaskExecutionStatesResponse{}, nil
}

// states returns the states reported of each attempt (by vertex id), in
// the order they came, and the number of report calls.
func (j *recordingJobMaster) states() (map[string][]jobplanev1.ExecutionState, int) {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := map[string][]jobplanev1.ExecutionState{}
	for _, call := range j.reports {
		for _, st := range call {
			out[st.GetAttempt().GetVertexId()] = append(out[st.GetAttempt().GetVertexId()], st.GetState())
		}
	}
	return out, len(j.reports)
}

// serveJobMaster serves a test JobMaster over HTTP/1.1 and h2c and
// returns its URL.
func serveJobMaster(t *testing.T, jm clusterv1connect.JobMasterServiceHandler) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(clusterv1connect.NewJobMasterServiceHandler(jm))
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.Protocols = transport.ServerProtocols() // the TaskExecutor's client speaks h2c
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}

// startRunning serves and runs a TaskExecutor with n slots and the given
// invokables; Run observes the ResourceManager of token(1) but finds no
// address to register at, which these tests do without.
func startRunning(t *testing.T, n int, invokables map[string]taskexecutor.Invokable) clusterv1connect.TaskExecutorServiceClient {
	t.Helper()
	return serveTaskExecutor(t, taskexecutor.Config{Slots: n, Invokables: invokables, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
}

// serveTaskExecutor runs a TaskExecutor of cfg, at a placeholder address
// and on a store of its own, until the test ends, and returns a client of
// it.
func serveTaskExecutor(t *testing.T, cfg taskexecutor.Config) clusterv1connect.TaskExecutorServiceClient {
	t.Helper()
	te, client := serveUnstarted(t, cfg)
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- te.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })
	return client
}

// serveUnstarted serves a TaskExecutor of cfg as serveTaskExecutor does,
// without running it. Unless cfg names a store, its store grants
// `jobmanager` to token(1), the ResourceManager token of the tests, and
// job "j" to token(2), the newer JobMaster that the held tests bring in
// by a call of its own (newerJobMaster); the job's token(1) comes with
// RequestSlot, which is taken as it comes.
func serveUnstarted(t *testing.T, cfg taskexecutor.Config) (*taskexecutor.TaskExecutor, clusterv1connect.TaskExecutorServiceClient) {
	t.Helper()
	if cfg.Store == nil {
		leaders := taskexecutor.NewLeaders(grant(1))
		leaders.GrantJob("j", grant(2))
		cfg.Store = leaders
	}
	cfg.Address, cfg.HTTPClient = "http://127.0.0.1:1", transport.NewClient(nil)
	te, err := taskexecutor.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, h := te.Handler()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return te, clusterv1connect.NewTaskExecutorServiceClient(srv.Client(), srv.URL)
}

func slotRequests(jm string, job string, jmEpoch uint64, n int) []*clusterv1.SlotRequest {
	var out []*clusterv1.SlotRequest
	for i := range n {
		out = append(out, &clusterv1.SlotRequest{
			SlotIndex: int32(i), AllocationId: job + string(rune('a'+i)), JobId: job, JobMasterAddress: jm, JobMasterToken: token(jmEpoch),
		})
	}
	return out
}

// jmTimeout is the heartbeat timeout the deployments of these tests name,
// as JobMasters name theirs.
var jmTimeout = durationpb.New(time.Minute)

// waitFor polls cond until it holds, for at most 10s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("still waiting after 10s for %s", what)
		}
	}
}

// The slots of one RequestSlots go to their JobMaster in one offer, which
// registers the TaskExecutor too, not in calls per slot; a slot that cannot be
// allocated is refused alone, by its index.
func TestRequestSlotsOffersTogether(t *testing.T) {
	jm := &recordingJobMaster{batch: true}
	url := serveJobMaster(t, jm)
	leaders := taskexecutor.NewLeaders(grant(1))
	te := serveTaskExecutor(t, taskexecutor.Config{Slots: 9, Store: leaders, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx := context.Background()
	if _, err := te.RequestSlot(ctx, &clusterv1.RequestSlotRequest{
		ResourceManagerToken: token(1), SlotIndex: 7, AllocationId: "other", JobId: "other", JobMasterAddress: url, JobMasterToken: token(1),
	}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the first offer", func() bool { jm.mu.Lock(); defer jm.mu.Unlock(); return len(jm.offers) == 1 })

	slots := slotRequests(url, "j", 3, 8) // slot 7 is taken
	resp, err := te.RequestSlots(ctx, &clusterv1.RequestSlotsRequest{ResourceManagerToken: token(1), Slots: slots})
	if err != nil {
		t.Fatalf("RequestSlots: %v", err)
	}
	if r := resp.GetRefused(); len(r) != 1 || r[0].GetIndex() != 7 || r[0].GetReason() != jobplanev1.ErrorReason_ERROR_REASON_SLOT_OCCUPIED {
		t.Errorf("refused = %v, want slot 7 (index 7) SLOT_OCCUPIED", r)
	}
	if resp.GetSlotReportVersion() == 0 {
		t.Errorf("slot report version 0, want the version with the allocations")
	}
	waitFor(t, "the job's offer", func() bool { jm.mu.Lock(); defer jm.mu.Unlock(); return len(jm.offers) == 2 })
	jm.mu.Lock()
	registers, separate, offers := jm.registers, jm.separate, jm.offers
	jm.mu.Unlock()
	if registers != 2 || separate != 0 || len(offers[1]) != 7 {
		t.Errorf("got %d registrations (%d by RegisterTaskExecutor) and an offer of %d slots for two jobs; want 2 (0) and 7: one call for the job's 7 slots, registering as it offers", registers, separate, len(offers[1]))
	}
	// Repeating the call changes nothing and offers nothing new.
	if resp, err := te.RequestSlots(ctx, &clusterv1.RequestSlotsRequest{ResourceManagerToken: token(1), Slots: slots[:7]}); err != nil || len(resp.GetRefused()) != 0 {
		t.Errorf("repeated RequestSlots = %v, %v; want every slot allocated", resp, err)
	}

	for _, tc := range []struct {
		name string
		req  *clusterv1.RequestSlotsRequest
		code connect.Code
	}{
		{"no ResourceManager token", &clusterv1.RequestSlotsRequest{Slots: slotRequests(url, "k", 1, 1)}, connect.CodeInvalidArgument},
		{"no slots", &clusterv1.RequestSlotsRequest{ResourceManagerToken: token(1)}, 0},
		{"missing field", &clusterv1.RequestSlotsRequest{ResourceManagerToken: token(1), Slots: []*clusterv1.SlotRequest{{AllocationId: "x", JobId: "k", JobMasterToken: token(1)}}}, connect.CodeInvalidArgument},
		{"slot out of range", &clusterv1.RequestSlotsRequest{ResourceManagerToken: token(1), Slots: []*clusterv1.SlotRequest{{SlotIndex: 9, AllocationId: "x", JobId: "k", JobMasterAddress: url, JobMasterToken: token(1)}}}, connect.CodeInvalidArgument},
	} {
		_, err := te.RequestSlots(ctx, tc.req)
		if got := connect.CodeOf(err); err != nil && got != tc.code || err == nil && tc.code != 0 {
			t.Errorf("%s: %v, want code %v", tc.name, err, tc.code)
		}
	}
	// A newer ResourceManager was granted and seen: the older token is
	// refused whole.
	leaders.Grant(grant(2))
	if _, err := te.RequestSlots(ctx, &clusterv1.RequestSlotsRequest{ResourceManagerToken: token(2)}); err != nil {
		t.Fatal(err)
	}
	if _, err := te.RequestSlots(ctx, &clusterv1.RequestSlotsRequest{ResourceManagerToken: token(1), Slots: slotRequests(url, "k", 1, 1)}); !apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_STALE_FENCING_TOKEN) {
		t.Errorf("RequestSlots with an older ResourceManager token: %v, want STALE_FENCING_TOKEN", err)
	}
	// A JobMaster token older than the job's is refused per slot.
	resp, err = te.RequestSlots(ctx, &clusterv1.RequestSlotsRequest{ResourceManagerToken: token(2), Slots: []*clusterv1.SlotRequest{{
		SlotIndex: 8, AllocationId: "stale", JobId: "j", JobMasterAddress: url, JobMasterToken: token(2),
	}}})
	if err != nil || len(resp.GetRefused()) != 1 || resp.GetRefused()[0].GetReason() != jobplanev1.ErrorReason_ERROR_REASON_STALE_FENCING_TOKEN {
		t.Errorf("RequestSlots with an older JobMaster token = %v, %v; want the slot refused STALE_FENCING_TOKEN", resp, err)
	}
}

// SubmitTasks deploys each attempt on its own: the ones it cannot deploy
// are refused by index, the others run. The attempts start without
// waiting for their RUNNING reports, and the reports made meanwhile go
// together in the next call, in order per attempt.
func TestSubmitTasksDeploysAndReportsTogether(t *testing.T) {
	const n = 6
	jm := &recordingJobMaster{batch: true, hold: make(chan struct{})}
	url := serveJobMaster(t, jm)
	var started sync.WaitGroup
	started.Add(n)
	release := make(chan struct{})
	te := startRunning(t, n+1, map[string]taskexecutor.Invokable{"gate": func(ctx context.Context, _ taskexecutor.Task) error {
		started.Done()
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}})
	ctx := context.Background()
	if _, err := te.RequestSlots(ctx, &clusterv1.RequestSlotsRequest{ResourceManagerToken: token(1), Slots: slotRequests(url, "j", 5, n+1)}); err != nil {
		t.Fatal(err)
	}
	var tasks []*clusterv1.TaskDeployment
	for i := range n {
		tasks = append(tasks, &clusterv1.TaskDeployment{AllocationId: "j" + string(rune('a'+i)), Attempt: &jobplanev1.ExecutionAttemptId{VertexId: string(rune('p' + i))}, Invokable: "gate"})
	}
	tasks = append(tasks,
		&clusterv1.TaskDeployment{AllocationId: "nope", Attempt: &jobplanev1.ExecutionAttemptId{VertexId: "x"}, Invokable: "gate"},
		&clusterv1.TaskDeployment{AllocationId: "j" + string(rune('a'+n)), Attempt: &jobplanev1.ExecutionAttemptId{VertexId: "y"}, Invokable: "missing"},
	)
	if _, err := te.SubmitTasks(ctx, &clusterv1.SubmitTasksRequest{JobId: "j", JobMasterToken: token(4), HeartbeatTimeout: jmTimeout, Tasks: tasks}); !apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_STALE_FENCING_TOKEN) {
		t.Fatalf("SubmitTasks with an older token: %v, want STALE_FENCING_TOKEN", err)
	}
	if _, err := te.SubmitTasks(ctx, &clusterv1.SubmitTasksRequest{JobId: "j", JobMasterToken: token(5), HeartbeatTimeout: jmTimeout, Tasks: []*clusterv1.TaskDeployment{{AllocationId: "ja"}}}); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("SubmitTasks without attempt and invokable: %v, want INVALID_ARGUMENT", err)
	}
	resp, err := te.SubmitTasks(ctx, &clusterv1.SubmitTasksRequest{JobId: "j", JobMasterToken: token(5), HeartbeatTimeout: jmTimeout, Tasks: tasks})
	if err != nil {
		t.Fatalf("SubmitTasks: %v", err)
	}
	refused := map[int32]jobplanev1.ErrorReason{}
	for _, r := range resp.GetRefused() {
		refused[r.GetIndex()] = r.GetReason()
	}
	if len(refused) != 2 || refused[n] != jobplanev1.ErrorReason_ERROR_REASON_SLOT_NOT_ALLOCATED || refused[n+1] != jobplanev1.ErrorReason_ERROR_REASON_UNKNOWN_INVOKABLE {
		t.Errorf("refused = %v, want index %d SLOT_NOT_ALLOCATED and %d UNKNOWN_INVOKABLE", resp.GetRefused(), n, n+1)
	}
	// Every attempt starts while the first report is held.
	all := make(chan struct{})
	go func() { started.Wait(); close(all) }()
	select {
	case <-all:
	case <-time.After(10 * time.Second):
		t.Fatal("the attempts did not start while their first RUNNING report was held")
	}
	// The first report call has come (on a loaded machine it may leave
	// only after the attempts started) and is held.
	waitFor(t, "the first report call", func() bool { jm.mu.Lock(); defer jm.mu.Unlock(); return jm.held })
	jm.mu.Lock()
	ended := jm.heldEnded
	jm.mu.Unlock()
	if ended {
		// The report call gave up (its timeout), and only then did the
		// attempts start.
		t.Fatal("the attempts started only once the held RUNNING report call had ended")
	}
	close(jm.hold)
	close(release)
	waitFor(t, "every attempt's FINISHED report", func() bool {
		states, _ := jm.states()
		for i := range n {
			if s := states[string(rune('p'+i))]; len(s) == 0 || s[len(s)-1] != jobplanev1.ExecutionState_EXECUTION_STATE_FINISHED {
				return false
			}
		}
		return true
	})
	states, calls := jm.states()
	for v, s := range states {
		if len(s) != 2 || s[0] != jobplanev1.ExecutionState_EXECUTION_STATE_RUNNING || s[1] != jobplanev1.ExecutionState_EXECUTION_STATE_FINISHED {
			t.Errorf("attempt %s reported %v, want RUNNING then FINISHED", v, s)
		}
	}
	// The held call carried at least one RUNNING report, the next all
	// the others that were made meanwhile; the FINISHED reports follow.
	jm.mu.Lock()
	second := jm.reports[1]
	jm.mu.Unlock()
	if got := len(jm.reports[0]) + len(second); got < n {
		t.Errorf("the first two report calls carried %d RUNNING reports, want all %d (made while the first was held)", got, n)
	}
	if jm.singles != 0 || calls > 2+n {
		t.Errorf("%d report calls, %d of them one-change; want batched calls only", calls, jm.singles)
	}
}

// A JobMaster without UpdateTaskExecutionStates gets one
// UpdateTaskExecutionState per change, in order.
func TestReportsFallBackToOneChangePerCall(t *testing.T) {
	jm := &recordingJobMaster{}
	url := serveJobMaster(t, jm)
	te := startRunning(t, 2, nil)
	ctx := context.Background()
	if _, err := te.RequestSlots(ctx, &clusterv1.RequestSlotsRequest{ResourceManagerToken: token(1), Slots: slotRequests(url, "j", 1, 2)}); err != nil {
		t.Fatal(err)
	}
	resp, err := te.SubmitTasks(ctx, &clusterv1.SubmitTasksRequest{JobId: "j", JobMasterToken: token(1), HeartbeatTimeout: jmTimeout, Tasks: []*clusterv1.TaskDeployment{
		{AllocationId: "ja", Attempt: &jobplanev1.ExecutionAttemptId{VertexId: "p"}, Invokable: "noop"},
		{AllocationId: "jb", Attempt: &jobplanev1.ExecutionAttemptId{VertexId: "q"}, Invokable: "noop"},
	}})
	if err != nil || len(resp.GetRefused()) != 0 {
		t.Fatalf("SubmitTasks = %v, %v", resp, err)
	}
	waitFor(t, "four reports", func() bool { jm.mu.Lock(); defer jm.mu.Unlock(); return jm.singles == 4 })
	states, _ := jm.states()
	for _, v := range []string{"p", "q"} {
		if s := states[v]; len(s) != 2 || s[0] != jobplanev1.ExecutionState_EXECUTION_STATE_RUNNING || s[1] != jobplanev1.ExecutionState_EXECUTION_STATE_FINISHED {
			t.Errorf("attempt %s reported %v, want RUNNING then FINISHED", v, s)
		}
	}
}

// FreeSlots frees the job's listed allocations under a current token, and
// nothing under an older one.
func TestFreeSlots(t *testing.T) {
	jm := &recordingJobMaster{batch: true}
	url := serveJobMaster(t, jm)
	te := startRunning(t, 3, nil)
	ctx := context.Background()
	if _, err := te.RequestSlots(ctx, &clusterv1.RequestSlotsRequest{ResourceManagerToken: token(1), Slots: slotRequests(url, "j", 2, 3)}); err != nil {
		t.Fatal(err)
	}
	held := func() []string {
		resp, err := te.Heartbeat(ctx, &clusterv1.TaskExecutorServiceHeartbeatRequest{Sender: &clusterv1.TaskExecutorServiceHeartbeatRequest_ResourceManagerToken{ResourceManagerToken: token(1)}})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, s := range resp.GetSlotReport().GetSlots() {
			if s.GetAllocationId() != "" {
				out = append(out, s.GetAllocationId())
			}
		}
		return out
	}
	if _, err := te.FreeSlots(ctx, &clusterv1.FreeSlotsRequest{JobId: "j", JobMasterToken: token(1), AllocationIds: []string{"ja", "jb"}}); !apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_STALE_FENCING_TOKEN) {
		t.Errorf("FreeSlots with an older token: %v, want STALE_FENCING_TOKEN", err)
	}
	if _, err := te.FreeSlots(ctx, &clusterv1.FreeSlotsRequest{AllocationIds: []string{"ja"}}); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("FreeSlots without job and token: %v, want INVALID_ARGUMENT", err)
	}
	if got := held(); len(got) != 3 {
		t.Fatalf("held %v after refused FreeSlots, want all 3", got)
	}
	if _, err := te.FreeSlots(ctx, &clusterv1.FreeSlotsRequest{JobId: "j", JobMasterToken: token(2), AllocationIds: []string{"ja", "jc", "unknown"}}); err != nil {
		t.Fatalf("FreeSlots: %v", err)
	}
	if got := held(); len(got) != 1 || got[0] != "jb" {
		t.Errorf("held %v after freeing ja and jc, want [jb]", got)
	}
}

// held returns the allocations of te's slots, by slot index ("" for a
// free slot).
func held(t *testing.T, te clusterv1connect.TaskExecutorServiceClient) []string {
	t.Helper()
	resp, err := te.Heartbeat(context.Background(), &clusterv1.TaskExecutorServiceHeartbeatRequest{Sender: &clusterv1.TaskExecutorServiceHeartbeatRequest_ResourceManagerToken{ResourceManagerToken: token(1)}})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(resp.GetSlotReport().GetSlots()))
	for i, s := range resp.GetSlotReport().GetSlots() {
		out[i] = s.GetAllocationId()
	}
	return out
}

// Fencing holds item by item: a stale JobMaster token refuses its own
// slot of a RequestSlots and no other, and a SubmitTasks or FreeSlots
// under one job's token never acts on another job's slot.
func TestBatchCallsActOnlyOnTheirJob(t *testing.T) {
	jm := &recordingJobMaster{batch: true}
	url := serveJobMaster(t, jm)
	te := startRunning(t, 4, nil)
	ctx := context.Background()
	// Job k's current JobMaster token is 7.
	if _, err := te.RequestSlot(ctx, &clusterv1.RequestSlotRequest{
		ResourceManagerToken: token(1), SlotIndex: 3, AllocationId: "k1", JobId: "k", JobMasterAddress: url, JobMasterToken: token(7),
	}); err != nil {
		t.Fatal(err)
	}
	resp, err := te.RequestSlots(ctx, &clusterv1.RequestSlotsRequest{ResourceManagerToken: token(1), Slots: []*clusterv1.SlotRequest{
		{SlotIndex: 0, AllocationId: "j1", JobId: "j", JobMasterAddress: url, JobMasterToken: token(3)},
		{SlotIndex: 1, AllocationId: "k0", JobId: "k", JobMasterAddress: url, JobMasterToken: token(6)},
		{SlotIndex: 2, AllocationId: "j2", JobId: "j", JobMasterAddress: url, JobMasterToken: token(3)},
	}})
	if err != nil {
		t.Fatalf("RequestSlots: %v", err)
	}
	if r := resp.GetRefused(); len(r) != 1 || r[0].GetIndex() != 1 || r[0].GetReason() != jobplanev1.ErrorReason_ERROR_REASON_STALE_FENCING_TOKEN {
		t.Errorf("refused = %v, want only index 1 (job k under token 6 < 7), STALE_FENCING_TOKEN", r)
	}
	if got, want := held(t, te), []string{"j1", "", "j2", "k1"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("slots %q after RequestSlots, want %q", got, want)
	}

	sleep := func(alloc, vertex string) *clusterv1.TaskDeployment {
		return &clusterv1.TaskDeployment{AllocationId: alloc, Attempt: &jobplanev1.ExecutionAttemptId{VertexId: vertex}, Invokable: "sleep", Config: map[string]string{"duration": "1h"}}
	}
	sub, err := te.SubmitTasks(ctx, &clusterv1.SubmitTasksRequest{JobId: "j", JobMasterToken: token(3), HeartbeatTimeout: jmTimeout, Tasks: []*clusterv1.TaskDeployment{sleep("j1", "p"), sleep("k1", "q")}})
	if err != nil {
		t.Fatalf("SubmitTasks: %v", err)
	}
	if r := sub.GetRefused(); len(r) != 1 || r[0].GetIndex() != 1 || r[0].GetReason() != jobplanev1.ErrorReason_ERROR_REASON_SLOT_NOT_ALLOCATED {
		t.Errorf("refused = %v, want only index 1 (job k's allocation) SLOT_NOT_ALLOCATED", r)
	}
	// Job k's slot is still free for job k's own attempt.
	if _, err := te.SubmitTask(ctx, &clusterv1.SubmitTaskRequest{
		JobId: "k", JobMasterToken: token(7), AllocationId: "k1", HeartbeatTimeout: jmTimeout, Attempt: &jobplanev1.ExecutionAttemptId{VertexId: "r"}, Invokable: "sleep", Config: map[string]string{"duration": "1h"},
	}); err != nil {
		t.Errorf("SubmitTask of job k into its own slot: %v, want it deployed", err)
	}

	if _, err := te.FreeSlots(ctx, &clusterv1.FreeSlotsRequest{JobId: "j", JobMasterToken: token(3), AllocationIds: []string{"j2", "k1"}}); err != nil {
		t.Fatalf("FreeSlots: %v", err)
	}
	if _, err := te.FreeSlots(ctx, &clusterv1.FreeSlotsRequest{JobId: "k", JobMasterToken: token(6), AllocationIds: []string{"k1"}}); !apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_STALE_FENCING_TOKEN) {
		t.Errorf("FreeSlots of job k under token 6 < 7: %v, want STALE_FENCING_TOKEN", err)
	}
	if got, want := held(t, te), []string{"j1", "", "", "k1"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("slots %q after FreeSlots of j2 and k1 under job j's token, want %q (job k's slot kept)", got, want)
	}
}

package hastorerpc_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/hastore/etcdstore"
	"github.com/jobplane/jobplane/server/hastore/hastorerpc"
	"github.com/jobplane/jobplane/server/internal/rpcfuzz"
)

// storeMethods are HAStoreService's procedures, in proto order.
var storeMethods = hastorev1.File_jobplane_hastore_v1_ha_store_service_proto.Services().ByName("HAStoreService").Methods()

// storeSeeds are valid and invalid requests of each procedure.
func storeSeeds() map[protoreflect.Name][]proto.Message {
	fence := &jobplanev1.Fence{Election: "jobmanager", Token: &jobplanev1.FencingToken{SessionId: "s1", Epoch: 7}}
	badFence := &jobplanev1.Fence{Election: "job/", Token: &jobplanev1.FencingToken{SessionId: "a b"}}
	graph := &jobplanev1.JobGraph{Vertices: []*jobplanev1.JobVertex{{Id: "v", Invokable: "noop", Parallelism: 1}}}
	jobFence := &jobplanev1.Fence{Election: "job/j1", Token: &jobplanev1.FencingToken{SessionId: "s1", Epoch: 8}}
	checkpoint := &hastorev1.CompletedCheckpoint{JobId: "j1", CheckpointId: 3, States: []*jobplanev1.SubtaskState{
		{VertexId: "v", State: &jobplanev1.SubtaskState_Inline{Inline: []byte("state")}},
		{VertexId: "v", SubtaskIndex: 1, State: &jobplanev1.SubtaskState_Pointer{Pointer: "file:///s/1"}},
	}}
	return map[protoreflect.Name][]proto.Message{
		"OpenSession":          {&hastorev1.OpenSessionRequest{Ttl: durationpb.New(time.Second)}, &hastorev1.OpenSessionRequest{Ttl: durationpb.New(-time.Second)}},
		"KeepAlive":            {&hastorev1.KeepAliveRequest{SessionId: "s1"}},
		"CloseSession":         {&hastorev1.CloseSessionRequest{SessionId: "s1"}},
		"Campaign":             {&hastorev1.CampaignRequest{Election: "job/j1", SessionId: "s1", Address: "http://127.0.0.1:1"}, &hastorev1.CampaignRequest{Election: "nope"}},
		"Withdraw":             {&hastorev1.WithdrawRequest{Election: "jobmanager", SessionId: "s1"}},
		"WatchSession":         {&hastorev1.WatchSessionRequest{SessionId: "s1"}},
		"Resign":               {&hastorev1.ResignRequest{Fence: fence}, &hastorev1.ResignRequest{Fence: badFence}},
		"ConfirmLeadership":    {&hastorev1.ConfirmLeadershipRequest{Fence: fence, Address: "http://127.0.0.1:1"}},
		"GetLeader":            {&hastorev1.GetLeaderRequest{Election: "jobmanager"}, &hastorev1.GetLeaderRequest{Election: "job/../x"}},
		"ObserveLeader":        {&hastorev1.ObserveLeaderRequest{Election: "job/j1"}},
		"PutExecutionPlan":     {&hastorev1.PutExecutionPlanRequest{Fence: fence, Plan: &hastorev1.ExecutionPlan{JobId: "j1", JobGraph: graph}}},
		"GetExecutionPlan":     {&hastorev1.GetExecutionPlanRequest{JobId: "j1"}},
		"ListExecutionPlans":   {&hastorev1.ListExecutionPlansRequest{PageSize: 2, PageToken: "j0"}},
		"DeleteExecutionPlan":  {&hastorev1.DeleteExecutionPlanRequest{Fence: fence, JobId: "j1"}},
		"RequestJobCancel":     {&hastorev1.RequestJobCancelRequest{Fence: badFence, JobId: "j1"}},
		"CreateDirtyJobResult": {&hastorev1.CreateDirtyJobResultRequest{Fence: fence, Result: &jobplanev1.JobResult{JobId: "j1", Status: jobplanev1.JobStatus_JOB_STATUS_FINISHED}}},
		"MarkJobResultClean":   {&hastorev1.MarkJobResultCleanRequest{Fence: fence, JobId: "j1"}},
		"GetJobResultEntry":    {&hastorev1.GetJobResultEntryRequest{JobId: "j1"}},
		"ListJobResultEntries": {&hastorev1.ListJobResultEntriesRequest{PageSize: -1}},
		"DeleteJobResultEntry": {&hastorev1.DeleteJobResultEntryRequest{Fence: fence, JobId: "j1"}},
		"AddTaskExecutor":      {&hastorev1.AddTaskExecutorRequest{Fence: fence, TaskExecutorId: "te-1"}, &hastorev1.AddTaskExecutorRequest{Fence: badFence}},
		"RemoveTaskExecutor":   {&hastorev1.RemoveTaskExecutorRequest{Fence: fence, TaskExecutorId: "te-1"}},
		"ListTaskExecutors":    {&hastorev1.ListTaskExecutorsRequest{PageSize: 1, PageToken: "te-0"}, &hastorev1.ListTaskExecutorsRequest{PageSize: -1}},
		"AddCheckpoint": {
			&hastorev1.AddCheckpointRequest{Fence: jobFence, Checkpoint: checkpoint, Retain: 2},
			&hastorev1.AddCheckpointRequest{Fence: fence, Checkpoint: checkpoint, Retain: -1},
		},
		"GetLatestCheckpoint": {&hastorev1.GetLatestCheckpointRequest{JobId: "j1"}},
		"ListCheckpoints":     {&hastorev1.ListCheckpointsRequest{JobId: "j1", PageSize: 1, PageToken: "3"}, &hastorev1.ListCheckpointsRequest{JobId: "j1", PageToken: "x"}},
		"AddSavepoint":        {&hastorev1.AddSavepointRequest{Fence: jobFence, Savepoint: &hastorev1.Savepoint{SavepointId: "sp-1", JobId: "j1", CheckpointId: 4}}},
		"GetSavepoint":        {&hastorev1.GetSavepointRequest{SavepointId: "sp-1"}},
		"ListSavepoints":      {&hastorev1.ListSavepointsRequest{PageSize: 1, PageToken: "sp-0"}, &hastorev1.ListSavepointsRequest{JobId: "j1", PageSize: -1}},
		"DeleteSavepoint":     {&hastorev1.DeleteSavepointRequest{Fence: fence, SavepointId: "sp-1"}},
	}
}

// storeInvalid says which decoded requests the store must refuse as
// invalid, whatever its state: a malformed job id, election or fence.
func storeInvalid(msg proto.Message) bool {
	if r, ok := msg.(interface{ GetJobId() string }); ok && !hastore.ValidJobID(r.GetJobId()) {
		// ListSavepoints of no job lists every job's.
		if l, isList := msg.(*hastorev1.ListSavepointsRequest); !isList || l.GetJobId() != "" {
			return true
		}
	}
	if r, ok := msg.(interface{ GetElection() string }); ok && !hastore.ValidElection(r.GetElection()) {
		return true
	}
	if r, ok := msg.(interface{ GetFence() *jobplanev1.Fence }); ok {
		f := r.GetFence()
		if hastore.ValidateFence(hastore.Fence{Election: f.GetElection(), Token: election.Token{SessionID: f.GetToken().GetSessionId(), Epoch: f.GetToken().GetEpoch()}}) != nil {
			return true
		}
	}
	return false
}

// Every body sent to any HAStoreService procedure, in the Connect
// protocol (binary and JSON) or gRPC framing, gets an answer in its
// protocol with a code the contract allows, and INVALID_ARGUMENT when it
// does not decode, or names a malformed job id, election or fence. The
// store is a real one, embedded, one for the whole target.
func FuzzHAStoreRequest(f *testing.F) {
	rpcfuzz.AddSeeds(f, storeMethods, storeSeeds())
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	store, err := etcdstore.Open(context.Background(), etcdstore.OpenConfig{DataDir: f.TempDir(), Logger: quiet})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { store.Close() })
	_, h := hastorerpc.NewHandler(hastorerpc.HandlerConfig{Store: store, Logger: quiet, Heartbeat: time.Second}).Path()
	// An internal service: unknown fields are kept for newer peers.
	target := rpcfuzz.Target{Handler: h, Methods: storeMethods, UnknownOK: true, Invalid: storeInvalid, StreamTimeout: 200 * time.Millisecond}
	f.Fuzz(func(t *testing.T, method, protocol uint8, raw bool, body []byte) {
		target.Check(t, method, protocol, raw, body)
	})
}

package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	"github.com/jobplane/jobplane/gen/jobplane/cluster/v1/clusterv1connect"
	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/hastore/etcdstore"
)

// The lifecycle floor is the least a job that runs to its end can cost
// on this machine (issue 33, target 1): per job, exactly what the
// contract requires of a JobManager and nothing else.
//
//  1. SubmitJob: the fenced plan write (as the one-write floor), then the
//     answer.
//  2. One deployment call, SubmitTask, to a TaskExecutor that answers at
//     once (StandInTaskExecutor, in the bench process).
//  3. One state report back, UpdateTaskExecutionState with FINISHED, from
//     that TaskExecutor.
//  4. The fenced finish write: Store.FinishJob, the write the JobManager's
//     Dispatcher makes for a result (result stored clean, plan removed,
//     in one etcd transaction).
//
// What it leaves out, on purpose: validation beyond a vertex and a job
// id, idempotency, the job's own election (the JobManager enters it in
// the plan write and resigns it at the end: a third write, which the
// issue's floor does not count), slot requests and offers, heartbeats,
// freeing the slot, and every in-memory index. Its JobMaster token is
// the floor's grant of the election jobmanager: the stand-in checks no
// token.
//
// Like-for-like with row 1a, which counts SubmitJob answers: the floor
// answers SubmitJob once the plan is written, as the JobManager does,
// and does the rest of the job afterwards, beside the next submissions,
// so its acks/s and latencies are of the same call; a job is done (for
// drain and the unfinished count) once its finish write is acknowledged.
// The JobManager's and the floor's backlog at a run's end (jobs
// acknowledged but not yet finished) go in 1a's note, so that neither
// side's rate hides work it deferred.
//
// Between the floor and the stand-in the protocol is h2c, as between the
// JobManager and the bench's TaskExecutors in either row; only the
// clients speak the row's protocol.

// lifecycleHeartbeatTimeout is the heartbeat timeout the floor's
// deployments carry, as the JobManager's do (the contract requires one);
// the stand-in ignores it.
const lifecycleHeartbeatTimeout = 10 * time.Second

// LifecycleStats counts the lifecycle floor's jobs since it began.
type LifecycleStats struct {
	// Acked counts submissions answered (their plan written).
	Acked int `json:"acked"`
	// Finished counts jobs whose finish write was acknowledged.
	Finished int `json:"finished"`
	// Failed counts jobs whose deployment or finish write failed; they
	// count as done, not pending.
	Failed int `json:"failed"`
	// Pending counts jobs acknowledged and not yet done.
	Pending int `json:"pending"`
	// Drained reports whether no job was pending when the answer was
	// written (for the drain command).
	Drained bool `json:"drained"`
	// FirstFailure is how the first failed job failed.
	FirstFailure string `json:"first_failure,omitempty"`
	// Error is set when the command itself failed.
	Error string `json:"error,omitempty"`
}

// floorJob is what the lifecycle floor keeps of a job between its plan
// write and its finish write: what its result needs.
type floorJob struct {
	name       string
	digest     []byte
	submitTime *timestamppb.Timestamp
}

// lifecycle is the lifecycle floor's JobMaster: it deploys each submitted
// job to the stand-in TaskExecutor and writes its result when the
// stand-in reports it FINISHED.
type lifecycle struct {
	clusterv1connect.UnimplementedJobMasterServiceHandler

	ctx   context.Context // the floor's: deployments end with it
	store *etcdstore.Store
	fence hastore.Fence
	token *jobplanev1.FencingToken
	te    clusterv1connect.TaskExecutorServiceClient
	teURL string

	mu      sync.Mutex
	jobs    map[string]*floorJob // acknowledged, not yet done
	drained chan struct{}        // closed when jobs becomes empty
	stats   LifecycleStats
	deploys sync.WaitGroup
}

func newLifecycle(ctx context.Context, store *etcdstore.Store, fence hastore.Fence, teURL string) *lifecycle {
	drained := make(chan struct{})
	close(drained)
	return &lifecycle{
		ctx: ctx, store: store, fence: fence, teURL: teURL,
		token: &jobplanev1.FencingToken{SessionId: fence.Token.SessionID, Epoch: fence.Token.Epoch},
		te:    clusterv1connect.NewTaskExecutorServiceClient(NewHTTPClient(H2C), teURL),
		jobs:  make(map[string]*floorJob), drained: drained,
	}
}

// start records job id as acknowledged, its plan written, and deploys
// its one task in the background.
func (l *lifecycle) start(plan *hastorev1.ExecutionPlan) {
	g := plan.GetJobGraph()
	j := &floorJob{name: g.GetName(), digest: plan.GetDigest(), submitTime: plan.GetSubmitTime()}
	l.mu.Lock()
	if len(l.jobs) == 0 {
		l.drained = make(chan struct{})
	}
	// Recorded before the deployment, whose report may come back before
	// its answer does.
	l.jobs[plan.GetJobId()] = j
	l.stats.Acked++
	l.mu.Unlock()
	v := g.GetVertices()[0]
	req := &clusterv1.SubmitTaskRequest{
		JobId: plan.GetJobId(), JobMasterToken: l.token, AllocationId: "floor-" + plan.GetJobId(),
		Attempt:  &jobplanev1.ExecutionAttemptId{VertexId: v.GetId()},
		TaskName: v.GetName(), Invokable: v.GetInvokable(), Config: v.GetConfig(), NumberOfSubtasks: v.GetParallelism(),
		HeartbeatTimeout: durationpb.New(lifecycleHeartbeatTimeout),
	}
	l.deploys.Go(func() {
		ctx, cancel := context.WithTimeout(l.ctx, callTimeout)
		defer cancel()
		if _, err := l.te.SubmitTask(ctx, req); err != nil {
			l.done(req.GetJobId(), fmt.Errorf("SubmitTask: %w", err))
		}
	})
}

// done ends job id's lifecycle: finished if failure is nil.
func (l *lifecycle) done(id string, failure error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.jobs[id]; !ok {
		return
	}
	delete(l.jobs, id)
	if failure != nil {
		l.stats.Failed++
		if l.stats.FirstFailure == "" {
			l.stats.FirstFailure = id + ": " + failure.Error()
		}
	} else {
		l.stats.Finished++
	}
	if len(l.jobs) == 0 {
		close(l.drained)
	}
}

// UpdateTaskExecutionState takes the stand-in's report: a FINISHED
// attempt ends its job with the fenced finish write, answered once the
// write is acknowledged. Other states change nothing.
func (l *lifecycle) UpdateTaskExecutionState(ctx context.Context, req *clusterv1.UpdateTaskExecutionStateRequest) (*clusterv1.UpdateTaskExecutionStateResponse, error) {
	id := req.GetJobId()
	l.mu.Lock()
	j := l.jobs[id]
	l.mu.Unlock()
	if j == nil {
		return nil, connect.NewError(connect.CodeNotFound, errors.New("no such attempt"))
	}
	if req.GetStatus().GetState() != jobplanev1.ExecutionState_EXECUTION_STATE_FINISHED {
		return &clusterv1.UpdateTaskExecutionStateResponse{}, nil
	}
	result := &jobplanev1.JobResult{
		JobId: id, Status: jobplanev1.JobStatus_JOB_STATUS_FINISHED,
		SubmitTime: j.submitTime, EndTime: timestamppb.Now(), Name: j.name, PlanDigest: j.digest,
		// Where the attempt ran goes with the result, as the JobManager's
		// does (its output is found by it after the job's end).
		Placements: []*jobplanev1.AttemptPlacement{{Attempt: req.GetStatus().GetAttempt(), TaskExecutorId: req.GetTaskExecutorId(), TaskExecutorAddress: l.teURL}},
	}
	if err := l.store.FinishJob(ctx, l.fence, result); err != nil {
		l.done(id, fmt.Errorf("FinishJob: %w", err))
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	l.done(id, nil)
	return &clusterv1.UpdateTaskExecutionStateResponse{}, nil
}

// drain waits until no job is pending, at most timeout (0: no wait), and
// returns the counts.
func (l *lifecycle) drain(ctx context.Context, timeout time.Duration) LifecycleStats {
	l.mu.Lock()
	ch := l.drained
	l.mu.Unlock()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	case <-ctx.Done():
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.stats
	s.Pending = len(l.jobs)
	s.Drained = s.Pending == 0
	return s
}

// wait waits for the deployment calls in flight (they end with the
// floor's context).
func (l *lifecycle) wait() { l.deploys.Wait() }

package jobmanager_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/taskexecutor"
	"github.com/jobplane/jobplane/server/localcluster"
	"google.golang.org/protobuf/proto"
)

// faults has TaskExecutors take no deployments in offer answers, and
// loses the answer to the first SubmitTask of vertex "a" (the
// attempt runs, but the JobMaster hears of no success), and then cuts every
// TaskExecutor off from the JobManager for a second: the JobMaster cannot
// tell whether the attempt runs.
type faults struct {
	lost    atomic.Bool
	cutOff  atomic.Int64 // unix nanos until which calls to the JobManager fail
	cutTime time.Duration
}

func (f *faults) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if offer, ok := req.Any().(*clusterv1.OfferSlotsRequest); ok {
			// Deployments come by SubmitTasks, whose answer is lost.
			offer.DeploymentsInAnswer = false
		}
		if req.Spec().IsClient {
			if time.Now().UnixNano() < f.cutOff.Load() {
				return nil, connect.NewError(connect.CodeUnavailable, errors.New("cut off"))
			}
			return next(ctx, req)
		}
		resp, err := next(ctx, req)
		if deploysA(req.Any()) && err == nil && f.lost.CompareAndSwap(false, true) {
			f.cutOff.Store(time.Now().Add(f.cutTime).UnixNano())
			return nil, connect.NewError(connect.CodeUnavailable, errors.New("the answer was lost"))
		}
		return resp, err
	}
}

// deploysA reports whether a call deploys an attempt of vertex "a",
// alone (SubmitTask) or with others (SubmitTasks).
func deploysA(msg any) bool {
	switch m := msg.(type) {
	case *clusterv1.SubmitTaskRequest:
		return m.GetAttempt().GetVertexId() == "a"
	case *clusterv1.SubmitTasksRequest:
		for _, d := range m.GetTasks() {
			if d.GetAttempt().GetVertexId() == "a" {
				return true
			}
		}
	}
	return false
}

func (f *faults) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (f *faults) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// slowToStop runs until canceled, then takes a while to stop, as a task
// that cleans up does.
func slowToStop(ctx context.Context, _ taskexecutor.Task) error {
	<-ctx.Done()
	time.Sleep(1500 * time.Millisecond) // the task's own cleanup
	return ctx.Err()
}

// An attempt whose deployment answer was lost may be running: its subtask
// is deployed again only once the attempt is known to have stopped, so
// the TaskExecutors' task log never shows the subtask on two of them at
// once. The job has a spare slot at hand for it (vertex b's, free once b
// finishes), so nothing but the JobMaster's knowledge of the attempt
// holds the new deployment back.
func TestLostDeploymentAnswerNeverRunsTwice(t *testing.T) {
	f := &faults{cutTime: time.Second}
	c := newCluster(t, localcluster.Config{
		Slots:                          1,
		HeartbeatTimeout:               3 * time.Second, // the cut-off is not a loss
		Invokables:                     map[string]taskexecutor.Invokable{"slow-to-stop": slowToStop},
		TaskExecutorInterceptors:       []connect.Interceptor{f},
		TaskExecutorClientInterceptors: []connect.Interceptor{f},
	})
	submit(t, c, "lost", &jobplanev1.JobGraph{
		Vertices: []*jobplanev1.JobVertex{
			{Id: "a", Invokable: "slow-to-stop", Parallelism: 1},
			{Id: "b", Invokable: "sleep", Parallelism: 1, Config: map[string]string{"duration": "300ms"}},
		},
		Config: &jobplanev1.JobConfig{SchedulingMode: jobplanev1.SchedulingMode_SCHEDULING_MODE_EAGER},
	})
	// Wait for the deployment after the lost answer.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		submits := 0
		for _, e := range c.Tasks().Events() {
			if e.JobID == "lost" && e.Method == "SubmitTask" && e.Attempt.GetVertexId() == "a" {
				submits++
			}
		}
		if submits >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the subtask was deployed %d times in 30s, want again after the lost answer", submits)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Dispatcher().CancelJob(ctx, &jobplanev1.CancelJobRequest{JobId: "lost"}); err != nil {
		t.Fatal(err)
	}
	result(t, c, "lost")

	neverTwice(t, c, "lost", "a")
}

// neverTwice checks the task log of a job's vertex: on each TaskExecutor
// an attempt runs from its SubmitTask to its terminal report, and no
// SubmitTask of the subtask may come while one runs anywhere — except the
// same attempt under the same token again to the TaskExecutor running it,
// which SubmitTask's idempotency makes a no-op (a JobMaster that has not
// yet heard of the attempt's state may deploy it again).
func neverTwice(t *testing.T, c *localcluster.Cluster, job, vertex string) {
	t.Helper()
	var log []string
	running := map[string]localcluster.TaskEvent{} // TaskExecutor -> its SubmitTask
	for _, e := range c.Tasks().Events() {
		if e.JobID != job || e.Attempt.GetVertexId() != vertex {
			continue
		}
		log = append(log, e.String())
		switch {
		case e.Method == "SubmitTask":
			if r, ok := running[e.TaskExecutor]; ok && len(running) == 1 && redelivery(r, e) {
				continue
			}
			if len(running) > 0 {
				t.Errorf("#%d: SubmitTask on %s while the subtask still runs on %v", e.Seq, e.TaskExecutor, running)
			}
			running[e.TaskExecutor] = e
		case e.Method == "UpdateTaskExecutionState" && isTerminal(e.State):
			delete(running, e.TaskExecutor)
		}
	}
	if t.Failed() || testing.Verbose() {
		t.Logf("task log:\n%s", strings.Join(log, "\n"))
	}
}

// lostOfferAnswer loses the first answer to an offer that carries a
// deployment: the TaskExecutor does not see it.
type lostOfferAnswer struct {
	lost atomic.Bool
}

func (l *lostOfferAnswer) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		resp, err := next(ctx, req)
		if a, ok := resp.(*connect.Response[clusterv1.OfferSlotsResponse]); ok && err == nil && len(a.Msg.GetDeployments()) > 0 && l.lost.CompareAndSwap(false, true) {
			return nil, connect.NewError(connect.CodeUnavailable, errors.New("the answer was lost"))
		}
		return resp, err
	}
}

func (l *lostOfferAnswer) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (l *lostOfferAnswer) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// An offer answer carrying a deployment that is lost does not lose the
// deployment: the attempt reaches the TaskExecutor (by the offer sent
// again, or by SubmitTasks once the JobMaster heard no state of it), the
// job finishes without a restart, and the subtask never runs twice.
func TestLostOfferAnswerStillDeploys(t *testing.T) {
	l := &lostOfferAnswer{}
	c := newCluster(t, localcluster.Config{
		TaskExecutors: 1, Slots: 1,
		TaskExecutorClientInterceptors: []connect.Interceptor{l},
	})
	submit(t, c, "lost-offer", &jobplanev1.JobGraph{Vertices: []*jobplanev1.JobVertex{
		{Id: "a", Invokable: "sleep", Parallelism: 1, Config: map[string]string{"duration": "100ms"}},
	}})
	if r := result(t, c, "lost-offer"); r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED || r.GetRestartCount() != 0 {
		t.Errorf("result %v, want FINISHED without a restart", r)
	}
	if !l.lost.Load() {
		t.Fatal("no offer answer carried a deployment")
	}
	neverTwice(t, c, "lost-offer", "a")
}

// redelivery reports whether b deploys the attempt a deployed, under the
// same token.
func redelivery(a, b localcluster.TaskEvent) bool {
	return a.Attempt.GetSubtaskIndex() == b.Attempt.GetSubtaskIndex() && a.Attempt.GetAttemptNumber() == b.Attempt.GetAttemptNumber() &&
		proto.Equal(a.Token, b.Token)
}

func isTerminal(s jobplanev1.ExecutionState) bool {
	switch s {
	case jobplanev1.ExecutionState_EXECUTION_STATE_FINISHED, jobplanev1.ExecutionState_EXECUTION_STATE_CANCELED, jobplanev1.ExecutionState_EXECUTION_STATE_FAILED:
		return true
	}
	return false
}

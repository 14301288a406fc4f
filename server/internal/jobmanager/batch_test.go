package jobmanager_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"connectrpc.com/connect"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	"github.com/jobplane/jobplane/gen/jobplane/cluster/v1/clusterv1connect"
	"github.com/jobplane/jobplane/server/localcluster"
)

// callCounter counts unary calls by procedure, and the OfferSlots
// answers that carried deployments as answeredWithDeployments.
type callCounter struct {
	mu    sync.Mutex
	calls map[string]int
}

// answeredWithDeployments is the key under which callCounter counts the
// OfferSlots answers that carried deployments.
const answeredWithDeployments = "OfferSlots answered with deployments"

func (c *callCounter) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		c.mu.Lock()
		c.calls[req.Spec().Procedure]++
		c.mu.Unlock()
		resp, err := next(ctx, req)
		if a, ok := resp.(*connect.Response[clusterv1.OfferSlotsResponse]); ok && err == nil && len(a.Msg.GetDeployments()) > 0 {
			c.mu.Lock()
			c.calls[answeredWithDeployments]++
			c.mu.Unlock()
		}
		return resp, err
	}
}

func (c *callCounter) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (c *callCounter) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

func (c *callCounter) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprint(c.calls)
}

func (c *callCounter) get(procedure string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[procedure]
}

// A job's slots and attempts travel per TaskExecutor, not per slot: each
// TaskExecutor gets one slot request for all its slots, offers them in
// one call that registers it too, gets the region's attempts in one
// deployment (a SubmitTasks, or the answer to its offer when the region
// is complete once the offer is taken), reports in batches of every job's changes
// (UpdateTaskExecutionStatesOfJobs) and frees in batches; no one-item or
// one-job call is made. (Twice that many calls are
// allowed, should a stall on a loaded machine cost the JobMaster its
// leadership once; one call per slot would be sixteen times as many.)
func TestDeploymentIsBatchedPerTaskExecutor(t *testing.T) {
	received, sent := &callCounter{calls: map[string]int{}}, &callCounter{calls: map[string]int{}}
	c := newCluster(t, localcluster.Config{
		TaskExecutors: 2, Slots: 16,
		TaskExecutorInterceptors:       []connect.Interceptor{received},
		TaskExecutorClientInterceptors: []connect.Interceptor{sent},
	})
	// One pipelined region of 32 subtasks, on 2 x 16 slots.
	g := twoVertices("noop", nil)
	for _, v := range g.GetVertices() {
		v.Parallelism = 16
	}
	submit(t, c, "batched", g)
	if r := result(t, c, "batched"); r.GetStatus().String() != "JOB_STATUS_FINISHED" {
		t.Fatalf("result = %v, want FINISHED", r)
	}
	tes := len(c.TaskExecutors())
	for _, tc := range []struct {
		counter   *callCounter
		procedure string
		want      int // per TaskExecutor; -1: at least one
	}{
		{received, clusterv1connect.TaskExecutorServiceRequestSlotsProcedure, 1},
		{received, clusterv1connect.TaskExecutorServiceRequestSlotProcedure, 0},
		{sent, clusterv1connect.JobMasterServiceRegisterTaskExecutorProcedure, 0}, // the offer registers
		{sent, clusterv1connect.JobMasterServiceOfferSlotsProcedure, 1},
		{received, clusterv1connect.TaskExecutorServiceSubmitTaskProcedure, 0},
		{sent, clusterv1connect.JobMasterServiceUpdateTaskExecutionStatesOfJobsProcedure, -1},
		{sent, clusterv1connect.JobMasterServiceUpdateTaskExecutionStatesProcedure, 0},
		{sent, clusterv1connect.JobMasterServiceUpdateTaskExecutionStateProcedure, 0},
		{received, clusterv1connect.TaskExecutorServiceFreeSlotsProcedure, -1},
		{received, clusterv1connect.TaskExecutorServiceFreeSlotProcedure, 0},
	} {
		got := tc.counter.get(tc.procedure)
		if tc.want < 0 && got == 0 || tc.want >= 0 && (got < tc.want*tes || got > 2*tc.want*tes) {
			t.Errorf("%s calls: %d, want %s", tc.procedure, got, map[bool]string{true: "at least one", false: fmt.Sprint(tc.want * tes)}[tc.want < 0])
		}
	}
	// One deployment per TaskExecutor: the region is complete once the
	// last offer is taken, so at least that offer's answer carries its
	// attempts.
	answered, submitted := sent.get(answeredWithDeployments), received.get(clusterv1connect.TaskExecutorServiceSubmitTasksProcedure)
	if answered < 1 || answered+submitted < tes || answered+submitted > 2*tes {
		t.Errorf("%d offer answers with deployments and %d SubmitTasks calls, want at least one answer and %d in all", answered, submitted, tes)
	}
	if t.Failed() {
		t.Logf("received %v, sent %v", received.String(), sent.String())
	}
}

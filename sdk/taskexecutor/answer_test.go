package taskexecutor_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/taskexecutor"
)

// deployingJobMaster takes every offer and, to a TaskExecutor that takes
// deployments in the answer, answers with one: an attempt of invokable
// into each accepted slot.
type deployingJobMaster struct {
	offerTaker
	invokable string
}

func (j deployingJobMaster) OfferSlots(ctx context.Context, req *clusterv1.OfferSlotsRequest) (*clusterv1.OfferSlotsResponse, error) {
	resp, err := j.offerTaker.OfferSlots(ctx, req)
	if err != nil || !req.GetDeploymentsInAnswer() {
		return resp, err
	}
	for _, o := range resp.GetAccepted() {
		resp.Deployments = append(resp.Deployments, &clusterv1.TaskDeployment{
			AllocationId: o.GetAllocationId(), Attempt: &jobplanev1.ExecutionAttemptId{VertexId: "v"}, Invokable: j.invokable,
		})
	}
	return resp, nil
}

// A TaskExecutor offers slots saying it takes deployments in the answer,
// and runs the attempts the answer carries, with no SubmitTasks call, in
// the slots they name, under the offer's token.
func TestAttemptsInTheOfferAnswerRun(t *testing.T) {
	url := serveJobMaster(t, deployingJobMaster{offerTaker: offerTaker{interval: time.Second}, invokable: "record"})
	started := make(chan taskexecutor.Task, 1)
	te := startRunning(t, 1, map[string]taskexecutor.Invokable{
		"record": func(ctx context.Context, task taskexecutor.Task) error {
			started <- task
			<-ctx.Done()
			return ctx.Err()
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := te.RequestSlot(ctx, &clusterv1.RequestSlotRequest{
		ResourceManagerToken: token(1), AllocationId: "a", JobId: "j", JobMasterAddress: url, JobMasterToken: token(7),
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case task := <-started:
		if task.JobID != "j" || task.VertexID != "v" {
			t.Errorf("started %+v, want v's attempt of job j", task)
		}
	case <-ctx.Done():
		t.Fatal("the attempt in the offer's answer did not start within 10s")
	}
	resp, err := te.Heartbeat(ctx, &clusterv1.TaskExecutorServiceHeartbeatRequest{Sender: &clusterv1.TaskExecutorServiceHeartbeatRequest_ResourceManagerToken{ResourceManagerToken: token(1)}})
	if err != nil {
		t.Fatal(err)
	}
	if s := resp.GetSlotReport().GetSlots()[0]; s.GetAllocationId() != "a" || s.GetJobId() != "j" {
		t.Errorf("slot %v, want held for job j under allocation a", s)
	}
	// The attempt runs under the offer's token: a deployment of the
	// same attempt under it is taken as done, one under an older token
	// is refused as stale.
	deploy := func(epoch uint64) error {
		_, err := te.SubmitTask(ctx, &clusterv1.SubmitTaskRequest{
			JobId: "j", JobMasterToken: token(epoch), AllocationId: "a", HeartbeatTimeout: durationpb.New(time.Minute),
			Attempt: &jobplanev1.ExecutionAttemptId{VertexId: "v"}, Invokable: "record",
		})
		return err
	}
	if err := deploy(7); err != nil {
		t.Errorf("the same deployment under the offer's token: %v, want taken", err)
	}
	if err := deploy(6); err == nil {
		t.Error("a deployment under an older token was taken")
	}
}

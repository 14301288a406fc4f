package jobmanager_test

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
	"github.com/jobplane/jobplane/server/localcluster"
)

func twoVertices(invokable string, config map[string]string) *jobplanev1.JobGraph {
	return &jobplanev1.JobGraph{
		Name: "two",
		Vertices: []*jobplanev1.JobVertex{
			{Id: "source", Invokable: "noop", Parallelism: 4},
			{Id: "sink", Invokable: invokable, Parallelism: 4, Config: config},
		},
		Edges: []*jobplanev1.JobEdge{{
			SourceVertexId: "source", TargetVertexId: "sink",
			Distribution: jobplanev1.DistributionPattern_DISTRIBUTION_PATTERN_ALL_TO_ALL,
			ResultType:   jobplanev1.ResultPartitionType_RESULT_PARTITION_TYPE_PIPELINED,
		}},
	}
}

func submit(t *testing.T, c *localcluster.Cluster, id string, g *jobplanev1.JobGraph) *jobplanev1.SubmitJobResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := c.Dispatcher().SubmitJob(ctx, &jobplanev1.SubmitJobRequest{JobId: id, JobGraph: g})
	if err != nil {
		t.Fatalf("SubmitJob(%s): %v", id, err)
	}
	return resp
}

func result(t *testing.T, c *localcluster.Cluster, id string) *jobplanev1.JobResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := c.Dispatcher().GetJobResult(ctx, &jobplanev1.GetJobResultRequest{JobId: id, Wait: true})
	if err != nil {
		t.Fatalf("GetJobResult(%s): %v", id, err)
	}
	return resp.GetResult()
}

func TestJobRunsToFinished(t *testing.T) {
	c := newCluster(t, localcluster.Config{})
	resp := submit(t, c, "finish", twoVertices("sleep", map[string]string{"duration": "20ms"}))
	if !resp.GetCreated() || resp.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_INITIALIZING {
		t.Errorf("SubmitJob = %v, want created INITIALIZING", resp)
	}
	if r := result(t, c, "finish"); r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("result = %v, want FINISHED", r)
	}
	// The result is in the store, clean, and the plan is gone.
	ctx := context.Background()
	entry, err := c.Store().GetJobResultEntry(ctx, "finish")
	if err != nil || entry.GetResult().GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Errorf("stored result = %v, %v", entry, err)
	}
	// The cleanup follows the result: the plan goes soon after.
	for deadline := time.Now().Add(20 * time.Second); ; {
		ids, _ := c.Store().ListExecutionPlans(ctx, "", 0)
		if len(ids) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("plans after the job ended: %v", ids)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Resubmitting the same plan returns the terminal job, never re-runs it.
	again := submit(t, c, "finish", twoVertices("sleep", map[string]string{"duration": "20ms"}))
	if again.GetCreated() || again.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Errorf("resubmit after FINISHED = %v, want created=false FINISHED", again)
	}
	// A different plan under the same id is refused.
	_, err = c.Dispatcher().SubmitJob(ctx, &jobplanev1.SubmitJobRequest{JobId: "finish", JobGraph: twoVertices("noop", nil)})
	if connect.CodeOf(err) != connect.CodeAlreadyExists || !apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_JOB_ALREADY_EXISTS) {
		t.Fatalf("different plan: err = %v, want ALREADY_EXISTS", err)
	}
	if _, md, _ := apierror.Info(err); md["globally_terminated"] != "true" {
		t.Errorf("metadata = %v, want globally_terminated=true", md)
	}
}

func TestRestartStrategies(t *testing.T) {
	c := newCluster(t, localcluster.Config{})
	flaky := twoVertices("fail", map[string]string{"attempts": "0,1", "message": "boom"})
	flaky.Config = &jobplanev1.JobConfig{RestartStrategy: &jobplanev1.RestartStrategy{Strategy: &jobplanev1.RestartStrategy_FixedDelay_{
		FixedDelay: &jobplanev1.RestartStrategy_FixedDelay{Attempts: 3, Delay: durationpb.New(10 * time.Millisecond)},
	}}}
	submit(t, c, "flaky", flaky)
	if r := result(t, c, "flaky"); r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED || r.GetRestartCount() != 2 {
		t.Errorf("fixed-delay result = %v, want FINISHED after 2 restarts", r)
	} else {
		// A job that succeeded has no failure in its result; the failures
		// it recovered from are its exception history.
		if r.GetFailure() != nil {
			t.Errorf("FINISHED result has a failure: %v", r.GetFailure())
		}
		if h := r.GetExceptionHistory(); len(h) != 2 || h[0].GetMessage() != "boom" || h[0].GetTime().AsTime().Before(h[1].GetTime().AsTime()) {
			t.Errorf("exception history = %v, want the 2 failures, most recent first", h)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if resp, err := c.Dispatcher().GetJob(ctx, &jobplanev1.GetJobRequest{JobId: "flaky"}); err != nil || resp.GetJob().GetSummary().GetFailure() != nil || len(resp.GetJob().GetExceptionHistory()) != 2 {
			t.Errorf("GetJob of the FINISHED job = %v, %v; want no failure and 2 exceptions", resp, err)
		}
	}

	submit(t, c, "doomed", twoVertices("fail", map[string]string{"message": "boom"}))
	r := result(t, c, "doomed")
	if r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FAILED || r.GetFailure().GetMessage() != "boom" {
		t.Errorf("no-restart result = %v, want FAILED with cause boom", r)
	}
}

func TestCancelRunningJob(t *testing.T) {
	c := newCluster(t, localcluster.Config{})
	submit(t, c, "long", twoVertices("sleep", map[string]string{"duration": "1h"}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Wait until it runs.
	for {
		resp, err := c.Dispatcher().GetJob(ctx, &jobplanev1.GetJobRequest{JobId: "long"})
		if err != nil {
			t.Fatal(err)
		}
		running := int32(0)
		for _, c := range resp.GetJob().GetSummary().GetTaskCounts() {
			if c.GetState() == jobplanev1.ExecutionState_EXECUTION_STATE_RUNNING {
				running = c.GetCount()
			}
		}
		if running == 4 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := c.Dispatcher().CancelJob(ctx, &jobplanev1.CancelJobRequest{JobId: "long"}); err != nil {
		t.Fatal(err)
	}
	if r := result(t, c, "long"); r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_CANCELED {
		t.Errorf("result = %v, want CANCELED", r)
	}
	if _, err := c.Dispatcher().CancelJob(ctx, &jobplanev1.CancelJobRequest{JobId: "long"}); err != nil {
		t.Errorf("second cancel: %v", err)
	}
	_, err := c.Dispatcher().CancelJob(ctx, &jobplanev1.CancelJobRequest{JobId: "nope"})
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("cancel of an unknown job: %v", err)
	}
}

func TestInvalidGraphRefused(t *testing.T) {
	c := newCluster(t, localcluster.Config{TaskExecutors: 1, Slots: 1})
	_, err := c.Dispatcher().SubmitJob(context.Background(), &jobplanev1.SubmitJobRequest{JobId: "bad", JobGraph: &jobplanev1.JobGraph{}})
	if connect.CodeOf(err) != connect.CodeInvalidArgument || len(apierror.Violations(err)) == 0 {
		t.Fatalf("err = %v, want INVALID_ARGUMENT with violations", err)
	}
	if ids, _ := c.Store().ListExecutionPlans(context.Background(), "", 0); len(ids) != 0 {
		t.Errorf("an invalid plan was persisted: %v", ids)
	}
}

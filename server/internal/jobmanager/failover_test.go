package jobmanager_test

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/taskexecutor"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/localcluster"
)

// Two Dispatchers share one store: the leader stops, and the other takes
// over, recovers the running job, and finishes the pending cleanup of a
// finished one without running it again.
func TestStandbyTakesOver(t *testing.T) {
	r := newRuns()
	var rec *localcluster.StoreRecorder
	c := newCluster(t, localcluster.Config{
		JobManagers: 2,
		Invokables:  map[string]taskexecutor.Invokable{"count": r.invokable},
		WrapStore: func(s hastore.Store) hastore.Store {
			rec = localcluster.NewStoreRecorder(s)
			return rec
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// The standby answers NOT_LEADER with the leader's address, and
	// writes nothing.
	_, err := c.JobManagers()[1].Dispatcher().SubmitJob(ctx, &jobplanev1.SubmitJobRequest{JobId: "elsewhere", JobGraph: countJob()})
	if connect.CodeOf(err) != connect.CodeUnavailable || !apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_NOT_LEADER) {
		t.Fatalf("submit to the standby: err = %v, want UNAVAILABLE NOT_LEADER", err)
	}
	if _, md, _ := apierror.Info(err); md["leader_address"] != c.JobManagers()[0].URL() {
		t.Errorf("leader_address = %q, want %q", md["leader_address"], c.JobManagers()[0].URL())
	}
	if _, err := c.Store().GetExecutionPlan(ctx, "elsewhere"); err == nil {
		t.Error("the standby persisted a plan")
	}

	// A job that finishes while its cleanup keeps failing: its result
	// stays dirty at the first leader.
	rec.FailNext("delete-plan", 1<<30)
	submit(t, c, "done", countJob())
	if res := result(t, c, "done"); res.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("result = %v", res)
	}
	if e, err := c.Store().GetJobResultEntry(ctx, "done"); err != nil || e.GetState() != hastorev1.JobResultState_JOB_RESULT_STATE_DIRTY {
		t.Fatalf("entry before takeover = %v, %v; want dirty", e, err)
	}
	// A job still running when the leader stops.
	submit(t, c, "running", twoVertices("sleep", map[string]string{"duration": "1s"}))

	c.JobManagers()[0].Stop()
	standby := c.JobManagers()[1].Dispatcher()
	resp, err := standby.GetJobResult(ctx, &jobplanev1.GetJobResultRequest{JobId: "running", Wait: true})
	for err != nil && ctx.Err() == nil {
		// The standby answers NOT_LEADER until it has taken over.
		time.Sleep(20 * time.Millisecond)
		resp, err = standby.GetJobResult(ctx, &jobplanev1.GetJobResultRequest{JobId: "running", Wait: true})
	}
	if err != nil || resp.GetResult().GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("recovered job: %v, %v; want FINISHED", resp, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		e, err := c.Store().GetJobResultEntry(ctx, "done")
		if err == nil && e.GetState() == hastorev1.JobResultState_JOB_RESULT_STATE_CLEAN {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("dirty result not cleaned by the new leader: %v, %v", e, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := c.Store().GetExecutionPlan(ctx, "done"); err == nil {
		t.Error("the finished job's plan is still stored")
	}
	for i := range 3 {
		if got := r.of("done/v/" + string(rune('0'+i))); got != 1 {
			t.Errorf("finished job's subtask %d ran %d times, want 1", i, got)
		}
	}
	// The old leader's Dispatcher is gone; the new one knows both jobs.
	list, err := standby.ListJobs(ctx, &jobplanev1.ListJobsRequest{})
	if err != nil || len(list.GetJobs()) != 2 {
		t.Errorf("jobs at the new leader = %v, %v", list, err)
	}
}

// A TaskExecutor that stops answering the JobMaster (while the
// ResourceManager still hears from it) is lost after the heartbeat
// timeout, and the job finishes on the other one.
func TestSilentTaskExecutorIsLost(t *testing.T) {
	c := newCluster(t, localcluster.Config{Slots: 2})
	// The attempts outlast the heartbeat timeout (1s in the harness), so
	// the JobMaster gives up on the partitioned TaskExecutor before they
	// end, and deploys them again on the other one once they certainly
	// stopped (the partitioned one stops them itself, hearing nothing).
	g := twoVertices("sleep", map[string]string{"duration": "2500ms"})
	g.Vertices[0].Parallelism, g.Vertices[1].Parallelism = 1, 3
	// Eager scheduling: the job's one region (4 subtasks) must be able to
	// run on the 2 slots the other TaskExecutor has.
	g.Config = &jobplanev1.JobConfig{RestartStrategy: &jobplanev1.RestartStrategy{Strategy: &jobplanev1.RestartStrategy_FixedDelay_{
		FixedDelay: &jobplanev1.RestartStrategy_FixedDelay{Attempts: 3},
	}}, SchedulingMode: jobplanev1.SchedulingMode_SCHEDULING_MODE_EAGER}
	submit(t, c, "silent", g)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Wait until both TaskExecutors run attempts, then silence the first.
	for {
		resp, err := c.Dispatcher().GetJob(ctx, &jobplanev1.GetJobRequest{JobId: "silent", View: jobplanev1.JobView_JOB_VIEW_FULL})
		if err != nil {
			t.Fatal(err)
		}
		on := map[string]bool{}
		for _, v := range resp.GetJob().GetVertices() {
			for _, st := range v.GetSubtasks() {
				if st.GetState() == jobplanev1.ExecutionState_EXECUTION_STATE_RUNNING {
					on[st.GetTaskExecutorId()] = true
				}
			}
		}
		if on[c.TaskExecutors()[0].ID()] && len(on) == 2 {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("attempts never ran on both TaskExecutors")
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.TaskExecutors()[0].Partition()
	res := result(t, c, "silent")
	if res.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED || res.GetRestartCount() < 1 {
		t.Errorf("result = %v, want FINISHED after a restart", res)
	}
}

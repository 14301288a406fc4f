package taskexecutor_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/taskexecutor"
	"github.com/jobplane/jobplane/sdk/wire/taskvalue"
)

// A finished task's value and accumulators travel with its FINISHED
// state, also when that state goes again with a heartbeat because its own
// report was not answered; a value over the limit, or an invalid
// accumulator name, fails the attempt instead, with a message that says
// why.
func TestFinishedStateCarriesTheTaskResult(t *testing.T) {
	jm := &unreachableReportsJobMaster{beats: map[uint64][]*jobplanev1.TaskExecutionStatus{}, beaten: map[uint64]int{}}
	url := serveJobMaster(t, jm)
	te := startRunning(t, 3, map[string]taskexecutor.Invokable{
		"ret": func(_ context.Context, task taskexecutor.Task) error {
			task.SetValue([]byte("first"))
			task.SetValue([]byte("forty-two"))
			task.Add("rows", 2)
			task.Add("rows", 3)
			task.Add("files.read", 1)
			return nil
		},
		"big": func(_ context.Context, task taskexecutor.Task) error {
			task.SetValue(make([]byte, taskvalue.DefaultMaxTaskValueBytes+1))
			return nil
		},
		"badname": func(_ context.Context, task taskexecutor.Task) error {
			task.Add("no spaces", 1)
			return nil
		},
	})
	ctx := context.Background()
	if _, err := te.RequestSlots(ctx, &clusterv1.RequestSlotsRequest{ResourceManagerToken: token(1), Slots: slotRequests(url, "j", 5, 3)}); err != nil {
		t.Fatal(err)
	}
	var tasks []*clusterv1.TaskDeployment
	for i, inv := range []string{"ret", "big", "badname"} {
		tasks = append(tasks, &clusterv1.TaskDeployment{AllocationId: "j" + string(rune('a'+i)), Attempt: &jobplanev1.ExecutionAttemptId{VertexId: inv}, Invokable: inv})
	}
	if _, err := te.SubmitTasks(ctx, &clusterv1.SubmitTasksRequest{JobId: "j", JobMasterToken: token(5), HeartbeatTimeout: jmTimeout, Tasks: tasks}); err != nil {
		t.Fatal(err)
	}
	final := map[string]*jobplanev1.TaskExecutionStatus{}
	waitFor(t, "a heartbeat to carry each attempt's final state", func() bool {
		jm.mu.Lock()
		defer jm.mu.Unlock()
		for _, st := range jm.beats[5] {
			if st.GetState() != jobplanev1.ExecutionState_EXECUTION_STATE_RUNNING {
				final[st.GetAttempt().GetVertexId()] = st
			}
		}
		return len(final) == 3
	})
	ret := final["ret"]
	if ret.GetState() != jobplanev1.ExecutionState_EXECUTION_STATE_FINISHED || string(ret.GetValue()) != "forty-two" ||
		len(ret.GetAccumulators()) != 2 || ret.GetAccumulators()["rows"] != 5 || ret.GetAccumulators()["files.read"] != 1 {
		t.Errorf("resent final state = %v, want FINISHED with value forty-two, rows 5, files.read 1", ret)
	}
	for inv, want := range map[string]string{"big": "max_task_value_bytes", "badname": `invalid accumulator name "no spaces"`} {
		st := final[inv]
		if st.GetState() != jobplanev1.ExecutionState_EXECUTION_STATE_FAILED || !strings.Contains(st.GetFailureMessage(), want) || len(st.GetValue()) != 0 {
			t.Errorf("%s: final state = %v %q (value %d bytes), want FAILED naming %q and no value", inv, st.GetState(), st.GetFailureMessage(), len(st.GetValue()), want)
		}
	}
}

// An attempt that finished under an older JobMaster that granted a task
// lease, and whose slot that JobMaster did not free, is listed to the
// newer JobMaster that adopts it with its value and accumulators: the
// built-in count returns its count and counts its steps.
func TestAdoptedFinishedAttemptCarriesItsResult(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fake := &jobMaster{timeout: time.Second, offers: offerRegisters, taskLease: 30 * time.Second}
	fake.answering.Store(true)
	jm, client, _ := startWithJobMaster(t, fake)
	if _, err := client.RequestSlot(ctx, &clusterv1.RequestSlotRequest{
		ResourceManagerToken: token(1), AllocationId: "a", JobId: "j", JobMasterAddress: jm, JobMasterToken: token(1),
	}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a heartbeat answer that grants the lease", func() bool { return fake.answered.Load() >= 2 })
	waitFor(t, "the deployment to be taken", func() bool {
		_, err := client.SubmitTask(ctx, &clusterv1.SubmitTaskRequest{
			JobId: "j", JobMasterToken: token(1), AllocationId: "a", HeartbeatTimeout: durationpb.New(time.Second),
			Attempt: &jobplanev1.ExecutionAttemptId{VertexId: "v"}, Invokable: "count", Config: map[string]string{"to": "3", "every": "1ms"},
		})
		return err == nil
	})
	waitFor(t, "the FINISHED report", func() bool { return slices.Contains(fake.reported(), "EXECUTION_STATE_FINISHED@1") })
	newerJobMaster(ctx, t, client)
	resp, err := adopt(ctx, client, jm, 2)
	if err != nil || len(resp.GetJobs()) != 1 || len(resp.GetJobs()[0].GetAttempts()) != 1 {
		t.Fatalf("AdoptAttempts = %v, %v; want the one finished attempt", resp, err)
	}
	st := resp.GetJobs()[0].GetAttempts()[0].GetStatus()
	if st.GetState() != jobplanev1.ExecutionState_EXECUTION_STATE_FINISHED || string(st.GetValue()) != "3" || st.GetAccumulators()["count.steps"] != 3 {
		t.Errorf("adopted status %v, want FINISHED with value 3 and count.steps 3", st)
	}
}

package taskexecutor_test

import (
	"context"
	"strings"
	"testing"

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

package localcluster_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
	"github.com/jobplane/jobplane/sdk/worker"
	"github.com/jobplane/jobplane/server/localcluster"
)

// vertexFinished reports whether every subtask of the job's vertex has
// FINISHED, as the leader's details say.
func vertexFinished(ctx context.Context, d jobplanev1connect.DispatcherServiceClient, jobID, vertex string) bool {
	resp, err := d.GetJob(ctx, &jobplanev1.GetJobRequest{JobId: jobID, View: jobplanev1.JobView_JOB_VIEW_FULL})
	if err != nil {
		return false
	}
	for _, v := range resp.GetJob().GetVertices() {
		if v.GetVertexId() != vertex || len(v.GetSubtasks()) == 0 {
			continue
		}
		for _, s := range v.GetSubtasks() {
			if s.GetState() != jobplanev1.ExecutionState_EXECUTION_STATE_FINISHED {
				return false
			}
		}
		return true
	}
	return false
}

// Tasks return values and add to accumulators; the job's result carries
// the value of each subtask's finished attempt, in vertex then subtask
// order, and each accumulator summed over one attempt per subtask: here
// the upstream subtasks finish, then a downstream one fails, and the
// restart of their region runs them all again, so the attempts that
// finished before the restart count for nothing. The result is durable:
// the standby that takes over after the leader stopped serves it as is.
func TestResultValuesAndAccumulators(t *testing.T) {
	var d jobplanev1connect.DispatcherServiceClient // set before any job runs
	c := start(t, localcluster.Config{JobManagers: 2, Slots: 4, Functions: map[string]worker.Func{
		"up": func(_ context.Context, task worker.Task) error {
			task.SetValue(fmt.Appendf(nil, "up%d@%d", task.SubtaskIndex, task.Attempt))
			task.Add("rows", int64(10*(task.SubtaskIndex+1)))
			task.Add("attempts.finished", 1)
			if task.Attempt == 0 {
				// This attempt finishes, but its region restarts after.
				task.Add("up.first.attempt", 1)
			}
			return nil
		},
		"down": func(ctx context.Context, task worker.Task) error {
			task.Add("attempts.finished", 1)
			if task.SubtaskIndex == 1 && task.Attempt == 0 {
				task.Add("failed.only", 1)
				for !vertexFinished(ctx, d, task.JobID, "up") {
					select {
					case <-ctx.Done():
						return ctx.Err()
					case <-time.After(10 * time.Millisecond):
					}
				}
				return fmt.Errorf("the first attempt fails once upstream finished")
			}
			if task.SubtaskIndex == 0 {
				task.SetValue([]byte{0xff, 0x00}) // not UTF-8
			}
			return nil
		},
	}})
	d = c.Dispatcher()
	g := &jobplanev1.JobGraph{Name: "results", Vertices: []*jobplanev1.JobVertex{
		{Id: "up", Invokable: "up", Parallelism: 2},
		{Id: "down", Invokable: "down", Parallelism: 2},
	}, Edges: []*jobplanev1.JobEdge{{SourceVertexId: "up", TargetVertexId: "down",
		Distribution: jobplanev1.DistributionPattern_DISTRIBUTION_PATTERN_ALL_TO_ALL,
		ResultType:   jobplanev1.ResultPartitionType_RESULT_PARTITION_TYPE_PIPELINED}},
		Config: fixedDelay(3)}
	res := execute(t, c, g)
	if res.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED || res.GetRestartCount() != 1 {
		t.Fatalf("status %v after %d restarts (failure %v), want FINISHED after 1", res.GetStatus(), res.GetRestartCount(), res.GetFailure())
	}
	check := func(who string, r *jobplanev1.JobResult) {
		t.Helper()
		var values []string
		for _, v := range r.GetValues() {
			a := v.GetAttempt()
			values = append(values, fmt.Sprintf("%s/%d/%d=%q", a.GetVertexId(), a.GetSubtaskIndex(), a.GetAttemptNumber(), v.GetValue()))
		}
		want := []string{`up/0/1="up0@1"`, `up/1/1="up1@1"`, `down/0/1="\xff\x00"`}
		if strings.Join(values, " ") != strings.Join(want, " ") {
			t.Errorf("%s: values %v, want %v", who, values, want)
		}
		wantAcc := map[string]int64{"rows": 30, "attempts.finished": 4}
		if got := r.GetAccumulators(); len(got) != len(wantAcc) || got["rows"] != 30 || got["attempts.finished"] != 4 {
			t.Errorf("%s: accumulators %v, want %v (one attempt per subtask)", who, got, wantAcc)
		}
	}
	check("Execute", res)

	// The leader stops; the standby reads the result from the store.
	jms := c.JobManagers()
	if err := jms[0].Stop(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got *jobplanev1.GetJobResultResponse
	for {
		var err error
		got, err = jms[1].Dispatcher().GetJobResult(ctx, &jobplanev1.GetJobResultRequest{JobId: res.GetJobId()})
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the standby never served the result: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	check("the new leader", got.GetResult())
	if !proto.Equal(got.GetResult().GetValues()[0], res.GetValues()[0]) {
		t.Errorf("the new leader's first value %v, want %v", got.GetResult().GetValues()[0], res.GetValues()[0])
	}
}

// The bounds of task results: a value over max_task_value_bytes fails
// its task (and so, without restarts, the job); values that together go
// over max_result_value_bytes, or accumulator names past
// max_accumulators, fail the job; each failure says which limit. The
// limits are the ones GetClusterOverview reports.
func TestResultLimits(t *testing.T) {
	c := start(t, localcluster.Config{Slots: 4, Functions: map[string]worker.Func{
		"value": func(_ context.Context, task worker.Task) error {
			n := 60 << 10
			if task.Config["size"] == "over" {
				n = 64<<10 + 1
			}
			task.SetValue(bytes.Repeat([]byte{'x'}, n))
			return nil
		},
		"names": func(_ context.Context, task worker.Task) error {
			for i := range 600 {
				task.Add(fmt.Sprintf("s%d.n%d", task.SubtaskIndex, i), 1)
			}
			return nil
		},
	}})
	ov, err := c.Dispatcher().GetClusterOverview(context.Background(), &jobplanev1.GetClusterOverviewRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if l := ov.GetLimits(); l.GetMaxTaskValueBytes() != 64<<10 || l.GetMaxResultValueBytes() != 512<<10 || l.GetMaxAccumulators() != 1000 {
		t.Errorf("limits %v, want 64 KiB per task, 512 KiB per result, 1000 accumulators", l)
	}
	for _, tc := range []struct {
		name        string
		g           *jobplanev1.JobGraph
		wantFailure string
	}{
		{"task value", &jobplanev1.JobGraph{Name: "v", Vertices: []*jobplanev1.JobVertex{{Id: "v", Invokable: "value", Parallelism: 1, Config: map[string]string{"size": "over"}}}}, "max_task_value_bytes"},
		{"result values", oneVertex("value", 9), "max_result_value_bytes"},
		{"accumulators", oneVertex("names", 2), "max_accumulators"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := execute(t, c, tc.g)
			if res.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FAILED || !strings.Contains(res.GetFailure().GetMessage(), tc.wantFailure) {
				t.Errorf("status %v, failure %q; want FAILED naming %s", res.GetStatus(), res.GetFailure().GetMessage(), tc.wantFailure)
			}
			total := 0
			for _, v := range res.GetValues() {
				total += len(v.GetValue())
			}
			if total > 512<<10 || len(res.GetAccumulators()) > 1000 {
				t.Errorf("the failed job's result keeps %d bytes of values and %d accumulators, over the limits", total, len(res.GetAccumulators()))
			}
		})
	}
}

// A subtask that finished under the old leader, in a job that finishes
// under the new one: its value survives, because the new leader's
// JobMaster, which finds no attempt to adopt, runs it again (docs/design.md,
// "What a change of leader loses"), and its accumulators count once, for
// the attempt that finished last.
func TestResultAcrossLeaderChange(t *testing.T) {
	var earlyRuns, lateRuns atomic.Int32
	release := make(chan struct{})
	c := start(t, localcluster.Config{JobManagers: 2, Slots: 2, Functions: map[string]worker.Func{
		"early": func(_ context.Context, task worker.Task) error {
			earlyRuns.Add(1)
			task.SetValue([]byte("early"))
			task.Add("runs", 1)
			return nil
		},
		"late": func(ctx context.Context, task worker.Task) error {
			lateRuns.Add(1)
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
			task.SetValue([]byte("late"))
			task.Add("runs", 1)
			return nil
		},
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := c.Client().Submit(ctx, &jobplanev1.JobGraph{Name: "across", Vertices: []*jobplanev1.JobVertex{
		{Id: "early", Invokable: "early", Parallelism: 1},
		{Id: "late", Invokable: "late", Parallelism: 1},
	}})
	if err != nil {
		t.Fatal(err)
	}
	d := c.JobManagers()[0].Dispatcher()
	for !vertexFinished(ctx, d, s.JobID, "early") || lateRuns.Load() == 0 {
		if ctx.Err() != nil {
			t.Fatal("early never finished beside a running late under the first leader")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := c.JobManagers()[0].Stop(); err != nil {
		t.Fatal(err)
	}
	for lateRuns.Load() < 2 {
		if ctx.Err() != nil {
			t.Fatal("the new leader never ran late again")
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(release)
	res, err := c.Client().Wait(ctx, s.JobID)
	if err != nil {
		t.Fatal(err)
	}
	var values []string
	for _, v := range res.GetValues() {
		values = append(values, v.GetAttempt().GetVertexId()+"="+string(v.GetValue()))
	}
	if res.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED || strings.Join(values, " ") != "early=early late=late" || res.GetAccumulators()["runs"] != 2 {
		t.Errorf("result %v with values %v and accumulators %v; want FINISHED, early=early late=late, runs 2 (once per subtask)", res.GetStatus(), values, res.GetAccumulators())
	}
	t.Logf("early ran %d times", earlyRuns.Load())
}

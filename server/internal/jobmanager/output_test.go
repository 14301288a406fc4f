//go:build unix

package jobmanager_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/taskexecutor"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
	"github.com/jobplane/jobplane/server/localcluster"
)

// taskOutput reads the output of a subtask through the Dispatcher.
func taskOutput(t *testing.T, c *localcluster.Cluster, req *jobplanev1.GetTaskOutputRequest) (*jobplanev1.GetTaskOutputResponse, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return c.Dispatcher().GetTaskOutput(ctx, req)
}

// follow reads a subtask's output from offset 0 in reads of at most max
// bytes, following next_offset until the attempt has ended and all was
// read.
func follow(t *testing.T, c *localcluster.Cluster, jobID, vertex string, subtask int32, max int32) ([]byte, *jobplanev1.GetTaskOutputResponse) {
	t.Helper()
	var out bytes.Buffer
	var offset int64
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := taskOutput(t, c, &jobplanev1.GetTaskOutputRequest{JobId: jobID, VertexId: vertex, SubtaskIndex: subtask, Offset: offset, MaxBytes: max})
		if err != nil {
			t.Fatalf("GetTaskOutput(%s, %s[%d], offset %d): %v", jobID, vertex, subtask, offset, err)
		}
		if resp.GetOffset() != offset || resp.GetDroppedBytes() != 0 {
			t.Fatalf("read from %d started at %d (%d dropped), want no gap", offset, resp.GetOffset(), resp.GetDroppedBytes())
		}
		out.Write(resp.GetData())
		offset = resp.GetNextOffset()
		if resp.GetEnded() && offset == resp.GetEndOffset() {
			return out.Bytes(), resp
		}
		if time.Now().After(deadline) {
			t.Fatalf("output of %s[%d] not ended after 30s: %q so far", vertex, subtask, out.Bytes())
		}
		if len(resp.GetData()) == 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
}

func execGraph(script string) *jobplanev1.JobGraph {
	argv, _ := json.Marshal([]string{"sh", "-c", script})
	return &jobplanev1.JobGraph{Vertices: []*jobplanev1.JobVertex{{Id: "sh", Invokable: "exec", Parallelism: 1, Config: map[string]string{"argv": string(argv)}}}}
}

// A client reads a subtask's output through DispatcherService: the lines
// its function logged while it runs and after the job FINISHED, an exec
// command's stdout and stderr whether it succeeded or failed; and gets
// INVALID_ARGUMENT for a vertex or subtask the job does not have, and
// NOT_FOUND for an unknown job or an attempt that never ran.
func TestGetTaskOutputThroughTheDispatcher(t *testing.T) {
	release := make(chan struct{})
	c := newCluster(t, localcluster.Config{AllowExec: true, Invokables: map[string]taskexecutor.Invokable{
		"chatty": func(ctx context.Context, task taskexecutor.Task) error {
			for i := range 3 {
				task.Logger.Info("working", "subtask", task.SubtaskIndex, "step", i)
			}
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
			task.Logger.Info("done", "subtask", task.SubtaskIndex)
			return nil
		},
	}})
	var executors []string
	for _, te := range c.TaskExecutors() {
		executors = append(executors, te.ID())
	}

	submit(t, c, "logs", &jobplanev1.JobGraph{Vertices: []*jobplanev1.JobVertex{{Id: "chat", Invokable: "chatty", Parallelism: 2}}})
	// While it runs: the lines logged so far, and not ended.
	var running *jobplanev1.GetTaskOutputResponse
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := taskOutput(t, c, &jobplanev1.GetTaskOutputRequest{JobId: "logs", VertexId: "chat", SubtaskIndex: 1})
		if err == nil && strings.Count(string(resp.GetData()), "msg=working") == 3 {
			running = resp
			break
		}
		if err != nil && !apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_EXECUTION_NOT_FOUND) {
			t.Fatalf("GetTaskOutput of a running subtask: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the running subtask's lines not read after 30s: %v, %v", resp, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if running.GetEnded() || running.GetAttemptNumber() != 0 || !slices.Contains(executors, running.GetTaskExecutorId()) {
		t.Errorf("output of a running subtask: ended %v, attempt %d, TaskExecutor %q; want not ended, attempt 0, one of %v",
			running.GetEnded(), running.GetAttemptNumber(), running.GetTaskExecutorId(), executors)
	}
	if !strings.Contains(string(running.GetData()), "subtask=1 step=2") {
		t.Errorf("output = %q, want subtask 1's lines", running.GetData())
	}
	close(release)
	if r := result(t, c, "logs"); r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("result = %v, want FINISHED", r)
	}
	// After FINISHED, followed in small reads: every line, ended.
	all, last := follow(t, c, "logs", "chat", 1, 16)
	if !bytes.HasPrefix(all, running.GetData()) || !strings.Contains(string(all), `msg=done subtask=1`) {
		t.Errorf("output after FINISHED = %q, want the running lines then the last one", all)
	}
	if last.GetTaskExecutorId() != running.GetTaskExecutorId() {
		t.Errorf("TaskExecutor after FINISHED = %q, want %q", last.GetTaskExecutorId(), running.GetTaskExecutorId())
	}
	// The same attempt, by number.
	one := int32(0)
	byNumber, err := taskOutput(t, c, &jobplanev1.GetTaskOutputRequest{JobId: "logs", VertexId: "chat", SubtaskIndex: 0, AttemptNumber: &one})
	if err != nil || !strings.Contains(string(byNumber.GetData()), "msg=done subtask=0") || !byNumber.GetEnded() {
		t.Errorf("GetTaskOutput(attempt 0 of subtask 0) = %v, %v; want its ended output", byNumber, err)
	}

	// exec: stdout and stderr, on success and on failure.
	submit(t, c, "exec-ok", execGraph("echo to-stdout; echo to-stderr >&2"))
	submit(t, c, "exec-bad", execGraph("echo bad-stdout; echo bad-stderr >&2; exit 4"))
	if r := result(t, c, "exec-ok"); r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("exec-ok = %v, want FINISHED", r)
	}
	if r := result(t, c, "exec-bad"); r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FAILED {
		t.Fatalf("exec-bad = %v, want FAILED", r)
	}
	for job, want := range map[string]string{"exec-ok": "to-stdout\nto-stderr\n", "exec-bad": "bad-stdout\nbad-stderr\n"} {
		if got, _ := follow(t, c, job, "sh", 0, 0); string(got) != want {
			t.Errorf("output of %s = %q, want %q", job, got, want)
		}
	}

	for _, tc := range []struct {
		name   string
		req    *jobplanev1.GetTaskOutputRequest
		code   connect.Code
		reason jobplanev1.ErrorReason
	}{
		{"unknown job", &jobplanev1.GetTaskOutputRequest{JobId: "ghost", VertexId: "chat"},
			connect.CodeNotFound, jobplanev1.ErrorReason_ERROR_REASON_JOB_NOT_FOUND},
		{"unknown vertex", &jobplanev1.GetTaskOutputRequest{JobId: "logs", VertexId: "nope"},
			connect.CodeInvalidArgument, jobplanev1.ErrorReason_ERROR_REASON_INVALID_ARGUMENT},
		{"subtask out of range", &jobplanev1.GetTaskOutputRequest{JobId: "logs", VertexId: "chat", SubtaskIndex: 2},
			connect.CodeInvalidArgument, jobplanev1.ErrorReason_ERROR_REASON_INVALID_ARGUMENT},
		{"negative offset", &jobplanev1.GetTaskOutputRequest{JobId: "logs", VertexId: "chat", Offset: -1},
			connect.CodeInvalidArgument, jobplanev1.ErrorReason_ERROR_REASON_INVALID_ARGUMENT},
		{"missing vertex", &jobplanev1.GetTaskOutputRequest{JobId: "logs"},
			connect.CodeInvalidArgument, jobplanev1.ErrorReason_ERROR_REASON_INVALID_ARGUMENT},
		{"an attempt that never ran", &jobplanev1.GetTaskOutputRequest{JobId: "logs", VertexId: "chat", AttemptNumber: proto.Int32(3)},
			connect.CodeNotFound, jobplanev1.ErrorReason_ERROR_REASON_EXECUTION_NOT_FOUND},
	} {
		_, err := taskOutput(t, c, tc.req)
		if connect.CodeOf(err) != tc.code || !apierror.Is(err, tc.reason) {
			t.Errorf("%s: %v, want %v %v", tc.name, err, tc.code, tc.reason)
		}
	}
}

// Once the TaskExecutor that keeps an output is cut off, reading it
// answers TASK_EXECUTOR_UNREACHABLE (retry) while the ResourceManager
// still counts it registered, and EXECUTION_NOT_FOUND once it dropped it.
func TestGetTaskOutputOfAGoneTaskExecutor(t *testing.T) {
	// The ResourceManager keeps a silent TaskExecutor registered for the
	// heartbeat timeout: long enough to see it unreachable first.
	c := newCluster(t, localcluster.Config{AllowExec: true, HeartbeatTimeout: 4 * time.Second})
	submit(t, c, "gone", execGraph("echo kept"))
	if r := result(t, c, "gone"); r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("result = %v, want FINISHED", r)
	}
	req := &jobplanev1.GetTaskOutputRequest{JobId: "gone", VertexId: "sh"}
	resp, err := taskOutput(t, c, req)
	if err != nil || string(resp.GetData()) != "kept\n" {
		t.Fatalf("GetTaskOutput = %v, %v; want the output", resp, err)
	}
	for _, te := range c.TaskExecutors() {
		if te.ID() == resp.GetTaskExecutorId() {
			te.Partition()
		}
	}
	reasons := map[jobplanev1.ErrorReason]bool{}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := taskOutput(t, c, req)
		reason, _, _ := apierror.Info(err)
		reasons[reason] = true
		switch {
		case reason == jobplanev1.ErrorReason_ERROR_REASON_EXECUTION_NOT_FOUND && connect.CodeOf(err) == connect.CodeNotFound:
			if !reasons[jobplanev1.ErrorReason_ERROR_REASON_TASK_EXECUTOR_UNREACHABLE] {
				t.Errorf("never saw TASK_EXECUTOR_UNREACHABLE before the TaskExecutor was dropped")
			}
			return
		case err == nil: // an answer on its way as it was cut off
		case reason == jobplanev1.ErrorReason_ERROR_REASON_TASK_EXECUTOR_UNREACHABLE && connect.CodeOf(err) == connect.CodeUnavailable:
		default:
			t.Fatalf("GetTaskOutput of a cut-off TaskExecutor's output: %v, want UNAVAILABLE TASK_EXECUTOR_UNREACHABLE, then NOT_FOUND EXECUTION_NOT_FOUND", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("still %v after 30s, want EXECUTION_NOT_FOUND once the TaskExecutor is dropped", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Where an ended job's attempts ran is kept in memory for the output
// retention only; past it, the placements kept with the job's result
// find the output for as long as its TaskExecutor keeps it, though the
// graph is no longer known to check a vertex against. A running job's
// output is found for as long as it runs.
func TestGetTaskOutputPastTheRetention(t *testing.T) {
	c := newCluster(t, localcluster.Config{AllowExec: true, OutputRetention: time.Nanosecond})
	submit(t, c, "running", twoVertices("sleep", map[string]string{"duration": "1h"}))
	submit(t, c, "ended", execGraph("echo kept with the result"))
	if r := result(t, c, "ended"); r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("result = %v, want FINISHED", r)
	}
	resp, err := taskOutput(t, c, &jobplanev1.GetTaskOutputRequest{JobId: "ended", VertexId: "sh"})
	if err != nil || string(resp.GetData()) != "kept with the result\n" || !resp.GetEnded() {
		t.Errorf("GetTaskOutput past the retention = %v, %v; want the output, from the result's placements", resp, err)
	}
	for _, req := range []*jobplanev1.GetTaskOutputRequest{
		{JobId: "ended", VertexId: "nope"},
		{JobId: "ended", VertexId: "sh", SubtaskIndex: 1},
		{JobId: "ended", VertexId: "sh", AttemptNumber: proto.Int32(1)},
	} {
		_, err := taskOutput(t, c, req)
		if connect.CodeOf(err) != connect.CodeNotFound || !apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_EXECUTION_NOT_FOUND) {
			t.Errorf("GetTaskOutput(%v) past the retention: %v, want NOT_FOUND EXECUTION_NOT_FOUND", req, err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := taskOutput(t, c, &jobplanev1.GetTaskOutputRequest{JobId: "running", VertexId: "sink", SubtaskIndex: 3})
		if err == nil {
			if resp.GetEnded() {
				t.Errorf("a running attempt's output says ended")
			}
			break
		}
		if !apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_EXECUTION_NOT_FOUND) || time.Now().After(deadline) {
			t.Fatalf("GetTaskOutput of a running subtask: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The job's result keeps where each attempt ran, so the next leader
// finds the output of a job that ended before it took over: the latest
// attempt by default, an earlier one by its number.
func TestGetTaskOutputAfterALeaderChange(t *testing.T) {
	c := newCluster(t, localcluster.Config{JobManagers: 2, Invokables: map[string]taskexecutor.Invokable{
		"flaky": func(_ context.Context, task taskexecutor.Task) error {
			task.Logger.Info("running", "attempt", task.Attempt)
			if task.Attempt == 0 {
				return errors.New("the first attempt fails")
			}
			return nil
		},
	}})
	addresses := map[string]string{}
	for _, te := range c.TaskExecutors() {
		addresses[te.ID()] = te.URL()
	}
	g := &jobplanev1.JobGraph{Vertices: []*jobplanev1.JobVertex{{Id: "f", Invokable: "flaky", Parallelism: 2}}}
	g.Config = &jobplanev1.JobConfig{RestartStrategy: &jobplanev1.RestartStrategy{Strategy: &jobplanev1.RestartStrategy_FixedDelay_{
		FixedDelay: &jobplanev1.RestartStrategy_FixedDelay{Attempts: 3},
	}}}
	submit(t, c, "before", g)
	r := result(t, c, "before")
	if r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("result = %v, want FINISHED", r)
	}
	// Per subtask, attempts 0 and 1, in order, each where it ran.
	var got []string
	for _, p := range r.GetPlacements() {
		a := p.GetAttempt()
		got = append(got, fmt.Sprintf("%s/%d/%d", a.GetVertexId(), a.GetSubtaskIndex(), a.GetAttemptNumber()))
		if want, ok := addresses[p.GetTaskExecutorId()]; !ok || p.GetTaskExecutorAddress() != want {
			t.Errorf("placement %v: want a TaskExecutor of the cluster, at its address %q", p, want)
		}
	}
	if want := []string{"f/0/0", "f/0/1", "f/1/0", "f/1/1"}; !slices.Equal(got, want) {
		t.Errorf("the result's placements are %v, want %v", got, want)
	}

	c.JobManagers()[0].Stop()
	next := c.JobManagers()[1].Dispatcher()
	read := func(req *jobplanev1.GetTaskOutputRequest) (*jobplanev1.GetTaskOutputResponse, error) {
		deadline := time.Now().Add(60 * time.Second)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			resp, err := next.GetTaskOutput(ctx, req)
			cancel()
			// The standby answers NOT_LEADER until it has taken over.
			if err == nil || !apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_NOT_LEADER) || time.Now().After(deadline) {
				return resp, err
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for _, subtask := range []int32{0, 1} {
		latest, err := read(&jobplanev1.GetTaskOutputRequest{JobId: "before", VertexId: "f", SubtaskIndex: subtask})
		if err != nil || latest.GetAttemptNumber() != 1 || !strings.Contains(string(latest.GetData()), "msg=running attempt=1") || !latest.GetEnded() {
			t.Errorf("subtask %d at the next leader: %v, %v; want attempt 1's output, ended", subtask, latest, err)
		}
		first, err := read(&jobplanev1.GetTaskOutputRequest{JobId: "before", VertexId: "f", SubtaskIndex: subtask, AttemptNumber: proto.Int32(0)})
		if err != nil || first.GetAttemptNumber() != 0 || !strings.Contains(string(first.GetData()), "msg=running attempt=0") {
			t.Errorf("attempt 0 of subtask %d at the next leader: %v, %v; want its output", subtask, first, err)
		}
	}
}

// A subtask that restarted has an output per attempt: the latest is read
// by default, an earlier one by its number.
func TestGetTaskOutputOfEachAttempt(t *testing.T) {
	c := newCluster(t, localcluster.Config{Invokables: map[string]taskexecutor.Invokable{
		"flaky": func(_ context.Context, task taskexecutor.Task) error {
			task.Logger.Info("running", "attempt", task.Attempt)
			if task.Attempt == 0 {
				return errors.New("the first attempt fails")
			}
			return nil
		},
	}})
	g := &jobplanev1.JobGraph{Vertices: []*jobplanev1.JobVertex{{Id: "f", Invokable: "flaky", Parallelism: 1}}}
	g.Config = &jobplanev1.JobConfig{RestartStrategy: &jobplanev1.RestartStrategy{Strategy: &jobplanev1.RestartStrategy_FixedDelay_{
		FixedDelay: &jobplanev1.RestartStrategy_FixedDelay{Attempts: 3},
	}}}
	submit(t, c, "flaky", g)
	if r := result(t, c, "flaky"); r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED || r.GetRestartCount() != 1 {
		t.Fatalf("result = %v, want FINISHED after one restart", r)
	}
	latest, err := taskOutput(t, c, &jobplanev1.GetTaskOutputRequest{JobId: "flaky", VertexId: "f"})
	if err != nil || latest.GetAttemptNumber() != 1 || !strings.Contains(string(latest.GetData()), "msg=running attempt=1") {
		t.Errorf("latest output = %v, %v; want attempt 1's", latest, err)
	}
	first, err := taskOutput(t, c, &jobplanev1.GetTaskOutputRequest{JobId: "flaky", VertexId: "f", AttemptNumber: proto.Int32(0)})
	if err != nil || first.GetAttemptNumber() != 0 || !strings.Contains(string(first.GetData()), "msg=running attempt=0") || !first.GetEnded() {
		t.Errorf("attempt 0's output = %v, %v; want its line, ended", first, err)
	}
}

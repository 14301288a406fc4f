package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"buf.build/go/protoyaml"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
)

var t0 = time.Date(2026, 12, 1, 13, 0, 0, 0, time.UTC)

func ts(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(t0.Add(d)) }

func counts(kv ...any) []*jobplanev1.ExecutionStateCount {
	var out []*jobplanev1.ExecutionStateCount
	for i := 0; i < len(kv); i += 2 {
		out = append(out, &jobplanev1.ExecutionStateCount{State: kv[i].(jobplanev1.ExecutionState), Count: int32(kv[i+1].(int))})
	}
	return out
}

const (
	running  = jobplanev1.ExecutionState_EXECUTION_STATE_RUNNING
	finished = jobplanev1.ExecutionState_EXECUTION_STATE_FINISHED
	failed   = jobplanev1.ExecutionState_EXECUTION_STATE_FAILED
)

func TestRenderJobList(t *testing.T) {
	jobs := []*jobplanev1.JobSummary{
		{JobId: "a", Name: "pipeline", Status: jobplanev1.JobStatus_JOB_STATUS_RUNNING, SubmitTime: ts(0), TaskCounts: counts(running, 2, finished, 1)},
		{JobId: "bb", Status: jobplanev1.JobStatus_JOB_STATUS_FAILED, SubmitTime: ts(0), EndTime: ts(90 * time.Second), RestartCount: 3},
	}
	var b bytes.Buffer
	renderJobList(&b, jobs, t0.Add(12300*time.Millisecond))
	want := "" +
		"JOB ID  NAME      STATUS   SUBTASKS               RESTARTS  SUBMITTED            DURATION\n" +
		"a       pipeline  RUNNING  2 running, 1 finished  0         2026-12-01 13:00:00  12.3s\n" +
		"bb      -         FAILED   -                      3         2026-12-01 13:00:00  1m30s\n"
	if b.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestRenderJobDetails(t *testing.T) {
	fail := &jobplanev1.FailureInfo{Message: "boom\nat line 2", Time: ts(time.Second),
		Attempt: &jobplanev1.ExecutionAttemptId{VertexId: "v", SubtaskIndex: 1, AttemptNumber: 0}, TaskExecutorId: "te-1"}
	d := &jobplanev1.JobDetails{
		Summary: &jobplanev1.JobSummary{JobId: "j1", Name: "n", Status: jobplanev1.JobStatus_JOB_STATUS_FAILED,
			SubmitTime: ts(0), EndTime: ts(2 * time.Second), RestartCount: 1, Failure: fail, TaskCounts: counts(finished, 1, failed, 1)},
		Vertices: []*jobplanev1.VertexDetails{{VertexId: "v", Name: "V", Parallelism: 2, State: failed, TaskCounts: counts(finished, 1, failed, 1),
			Subtasks: []*jobplanev1.SubtaskDetails{
				{SubtaskIndex: 0, AttemptNumber: 1, State: finished, TaskExecutorId: "te-2"},
				{SubtaskIndex: 1, AttemptNumber: 1, State: failed, TaskExecutorId: "te-1", Failure: fail},
			}}},
		ExceptionHistory: []*jobplanev1.FailureInfo{fail},
	}
	var b bytes.Buffer
	renderJobDetails(&b, d, t0.Add(time.Hour), false)
	out := b.String()
	for _, want := range []string{
		"Job:        j1\n", "Status:     FAILED\n", "Duration:   2s\n", "Restarts:   1\n",
		"Failure:    boom at line 2 (vertex v, subtask 1, attempt 0, on te-1)\n",
		"VERTEX  NAME  PARALLELISM  STATE   SUBTASKS\nv       V     2            FAILED  1 finished, 1 failed\n",
		"v       0        1        FINISHED  te-2           -\n",
		"Exception history (most recent first):\nTIME                 FAILURE\n2026-12-01 13:00:01  boom at line 2",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}

	// A running job's failure is the last one, that restarted it.
	b.Reset()
	runningJob := &jobplanev1.JobDetails{Summary: &jobplanev1.JobSummary{JobId: "j2", Status: jobplanev1.JobStatus_JOB_STATUS_RUNNING,
		SubmitTime: ts(0), RestartCount: 7, Failure: fail}}
	renderJobDetails(&b, runningJob, t0.Add(time.Hour), false)
	for _, want := range []string{"Restarts:      7\n", "Last failure:  boom at line 2 (vertex v, subtask 1, attempt 0, on te-1), at 2026-12-01 13:00:01\n"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("output of a running job lacks %q:\n%s", want, b.String())
		}
	}

	// Past maxSubtaskRows, the rest is counted unless all is asked for.
	v := &jobplanev1.VertexDetails{VertexId: "big", Parallelism: maxSubtaskRows + 5}
	for i := range maxSubtaskRows + 5 {
		v.Subtasks = append(v.Subtasks, &jobplanev1.SubtaskDetails{SubtaskIndex: int32(i), State: running})
	}
	big := &jobplanev1.JobDetails{Summary: &jobplanev1.JobSummary{JobId: "big"}, Vertices: []*jobplanev1.VertexDetails{v}}
	b.Reset()
	renderJobDetails(&b, big, t0, false)
	if !strings.Contains(b.String(), "... and 5 more subtasks") || strings.Count(b.String(), "\nbig ") != maxSubtaskRows+1 {
		t.Errorf("bounded subtasks: %d rows:\n%s", strings.Count(b.String(), "\nbig "), b.String())
	}
	b.Reset()
	renderJobDetails(&b, big, t0, true)
	if strings.Contains(b.String(), "more subtasks") || strings.Count(b.String(), "\nbig ") != maxSubtaskRows+6 {
		t.Errorf("all subtasks: %d rows", strings.Count(b.String(), "\nbig "))
	}
}

// An ended job whose vertices the cluster no longer keeps gets a note
// instead of the tables; a running one without vertices yet, none.
func TestRenderJobDetailsWithoutVertices(t *testing.T) {
	for _, tc := range []struct {
		status jobplanev1.JobStatus
		note   bool
	}{
		{jobplanev1.JobStatus_JOB_STATUS_FINISHED, true},
		{jobplanev1.JobStatus_JOB_STATUS_INITIALIZING, false},
	} {
		var b bytes.Buffer
		renderJobDetails(&b, &jobplanev1.JobDetails{Summary: &jobplanev1.JobSummary{JobId: "j", Status: tc.status, SubmitTime: ts(0)}}, t0, false)
		if got := strings.Contains(b.String(), "no longer keeps this ended job's vertices"); got != tc.note || strings.Contains(b.String(), "VERTEX") {
			t.Errorf("%v: note %v, want %v; no tables:\n%s", tc.status, got, tc.note, b.String())
		}
	}
}

func TestRenderCluster(t *testing.T) {
	o := &jobplanev1.GetClusterOverviewResponse{
		Leader:            &jobplanev1.LeaderInfo{Election: "jobmanager", Address: "http://127.0.0.1:8080", Token: &jobplanev1.FencingToken{SessionId: "s", Epoch: 7}},
		TaskExecutorCount: 1, SlotCount: 4, FreeSlotCount: 3, RunningJobCount: 1, FinishedJobCount: 2, StandbyCount: proto.Int32(1),
	}
	tes := []*jobplanev1.TaskExecutorInfo{{TaskExecutorId: "te-1", Address: "http://127.0.0.1:9000", SlotCount: 4, FreeSlotCount: 3,
		Invokables: []string{"noop", "sleep"}, Silence: durationpb.New(150 * time.Millisecond)}}
	var b bytes.Buffer
	renderCluster(&b, o, tes)
	want := "" +
		"Leader:         http://127.0.0.1:8080 (epoch 7)\n" +
		"Standbys:       1\n" +
		"TaskExecutors:  1\n" +
		"Slots:          3 free of 4\n" +
		"Jobs:           1 running, 2 finished, 0 canceled, 0 failed\n" +
		"\n" +
		"TASK EXECUTOR  ADDRESS                SLOTS  FREE  LAST HEARD  INVOKABLES\n" +
		"te-1           http://127.0.0.1:9000  4      3     200ms ago   noop,sleep\n"
	if b.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestResultText(t *testing.T) {
	for _, tc := range []struct {
		r    *jobplanev1.JobResult
		want string
	}{
		{&jobplanev1.JobResult{JobId: "j", Status: jobplanev1.JobStatus_JOB_STATUS_FINISHED, SubmitTime: ts(0), EndTime: ts(1500 * time.Millisecond)},
			"job j FINISHED after 1.5s"},
		{&jobplanev1.JobResult{JobId: "j", Status: jobplanev1.JobStatus_JOB_STATUS_FAILED, RestartCount: 2,
			Failure: &jobplanev1.FailureInfo{Message: "no invokable \"x\""}}, `job j FAILED (2 restarts): no invokable "x"`},
		{&jobplanev1.JobResult{JobId: "j", Status: jobplanev1.JobStatus_JOB_STATUS_CANCELED, RestartCount: 1}, "job j CANCELED (1 restart)"},
	} {
		if got := resultText(tc.r); got != tc.want {
			t.Errorf("resultText = %q, want %q", got, tc.want)
		}
	}
}

// -o json and -o yaml carry the message with the proto's field names, so
// that they read back as the same message.
func TestPrintStructured(t *testing.T) {
	s := &jobplanev1.JobSummary{JobId: "j", Name: "123", Status: jobplanev1.JobStatus_JOB_STATUS_RUNNING, RestartCount: 2, SubmitTime: ts(0)}
	for _, format := range []string{"json", "yaml"} {
		var b bytes.Buffer
		if err := printStructured(&b, format, s); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), "restart_count") {
			t.Errorf("%s lacks proto names:\n%s", format, b.String())
		}
		got := &jobplanev1.JobSummary{}
		var err error
		if format == "json" {
			err = protojson.Unmarshal(b.Bytes(), got)
		} else {
			err = protoyaml.Unmarshal(b.Bytes(), got)
		}
		if err != nil || !proto.Equal(got, s) {
			t.Errorf("%s reads back as %v, %v; want %v\n%s", format, got, err, s, b.String())
		}
	}
}

func TestPrintFields(t *testing.T) {
	o := &jobplanev1.GetClusterOverviewResponse{SlotCount: 4}
	tes := []proto.Message{&jobplanev1.TaskExecutorInfo{TaskExecutorId: "a"}, &jobplanev1.TaskExecutorInfo{TaskExecutorId: "b"}}
	var b bytes.Buffer
	if err := printFields(&b, "json", field{name: "overview", msgs: []proto.Message{o}}, field{name: "task_executors", msgs: tes, list: true}); err != nil {
		t.Fatal(err)
	}
	var v struct {
		Overview      map[string]any   `json:"overview"`
		TaskExecutors []map[string]any `json:"task_executors"`
	}
	if err := json.Unmarshal(b.Bytes(), &v); err != nil || v.Overview["slot_count"] != 4.0 || len(v.TaskExecutors) != 2 || v.TaskExecutors[1]["task_executor_id"] != "b" {
		t.Errorf("json = %s (%v)", b.String(), err)
	}
	b.Reset()
	if err := printFields(&b, "yaml", field{name: "overview", msgs: []proto.Message{o}}, field{name: "task_executors", list: true}); err != nil {
		t.Fatal(err)
	}
	var y map[string]any
	if err := yaml.Unmarshal(b.Bytes(), &y); err != nil || y["overview"].(map[string]any)["slot_count"] != 4 || len(y["task_executors"].([]any)) != 0 {
		t.Errorf("yaml = %s (%v)", b.String(), err)
	}
}

func TestProgress(t *testing.T) {
	s := &jobplanev1.JobSummary{JobId: "j", Name: "p", Status: jobplanev1.JobStatus_JOB_STATUS_RESTARTING, SubmitTime: ts(0), StatusTime: ts(time.Second),
		RestartCount: 1, TaskCounts: counts(running, 1, failed, 1), Failure: &jobplanev1.FailureInfo{Message: "boom"}}
	got := progressLines(s, t0.Add(2*time.Second))
	want := []string{"job j (p)", "status: RESTARTING   elapsed: 2s   restarts: 1", "subtasks: 1 running, 1 failed (2 in all)", "last failure: boom"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("progressLines = %q, want %q", got, want)
	}
	if got := progressLines(&jobplanev1.JobSummary{JobId: "j"}, t0); len(got) != 2 || got[1] != "status: UNSPECIFIED   elapsed: -   restarts: 0" {
		t.Errorf("progressLines without counts = %q", got)
	}
	if line := statusLine(nil, s); line != "2026-12-01 13:00:01 job j RESTARTING  subtasks: 1 running, 1 failed  restarts: 1  failure: boom" {
		t.Errorf("statusLine = %q", line)
	}
	// A restart that leaves the job RUNNING (a region restart) says how
	// many there were and why, at the time of the failure.
	run := &jobplanev1.JobSummary{JobId: "j", Status: jobplanev1.JobStatus_JOB_STATUS_RUNNING, StatusTime: ts(time.Second), RestartCount: 1}
	again := &jobplanev1.JobSummary{JobId: "j", Status: jobplanev1.JobStatus_JOB_STATUS_RUNNING, StatusTime: ts(time.Second), RestartCount: 3,
		Failure: &jobplanev1.FailureInfo{Message: "boom", Time: ts(5 * time.Second),
			Attempt: &jobplanev1.ExecutionAttemptId{VertexId: "v", SubtaskIndex: 0, AttemptNumber: 2}, TaskExecutorId: "te-1"}}
	for _, tc := range []struct {
		prev, s *jobplanev1.JobSummary
		want    string
	}{
		{run, again, "2026-12-01 13:00:05 job j RUNNING  restarted 3 times; last failure: boom (vertex v, subtask 0, attempt 2, on te-1)"},
		{&jobplanev1.JobSummary{Status: jobplanev1.JobStatus_JOB_STATUS_RUNNING}, run, "2026-12-01 13:00:01 job j RUNNING  restarted once"},
		{s, again, "2026-12-01 13:00:01 job j RUNNING  subtasks: -  restarts: 3"}, // a status change
	} {
		if line := statusLine(tc.prev, tc.s); line != tc.want {
			t.Errorf("statusLine after %d restarts = %q, want %q", tc.prev.GetRestartCount(), line, tc.want)
		}
	}

	var b bytes.Buffer
	v := &liveView{w: &b, width: func() int { return 20 }}
	v.draw([]string{"one", "a line longer than twenty"})
	v.draw([]string{"three"})
	if want := "\r\x1b[Jone\na line longer than…\n\x1b[2A\r\x1b[Jthree\n"; b.String() != want {
		t.Errorf("liveView wrote %q, want %q", b.String(), want)
	}
}

func TestJobViewMerges(t *testing.T) {
	var v jobView
	run := &jobplanev1.JobSummary{Status: jobplanev1.JobStatus_JOB_STATUS_RUNNING, StatusTime: ts(time.Second), TaskCounts: counts(running, 2)}
	if !v.update(run) {
		t.Error("first summary: no change reported")
	}
	// A refresh with the same status time updates the counts only.
	if v.update(&jobplanev1.JobSummary{Status: jobplanev1.JobStatus_JOB_STATUS_RUNNING, StatusTime: ts(time.Second), TaskCounts: counts(running, 1, finished, 1)}) {
		t.Error("a refresh of counts reported a status change")
	}
	if total(v.cur.GetTaskCounts()) != 2 || countsText(v.cur.GetTaskCounts()) != "1 running, 1 finished" {
		t.Errorf("counts = %v", v.cur.GetTaskCounts())
	}
	done := &jobplanev1.JobSummary{Status: jobplanev1.JobStatus_JOB_STATUS_FINISHED, StatusTime: ts(2 * time.Second)}
	if !v.update(done) {
		t.Error("FINISHED: no change reported")
	}
	if countsText(v.cur.GetTaskCounts()) != "2 finished" {
		t.Errorf("counts of a FINISHED job = %v", v.cur.GetTaskCounts())
	}
	// An older answer never takes a job back from a terminal status.
	if v.update(run) || v.cur.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Errorf("status after an older summary = %v", v.cur.GetStatus())
	}
}

package chaos

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jobplane/jobplane/server/taskexecutor"
)

var t0 = time.Date(2026, 12, 1, 16, 0, 0, 0, time.UTC)

// at is t0 plus s seconds.
func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

// rec is one attempt-log record of subtask j/v[0] on TaskExecutor te.
func rec(event, te string, attempt int, epoch uint64, when float64) taskexecutor.AttemptRecord {
	r := taskexecutor.AttemptRecord{Event: event, TaskExecutor: te, JobID: "j", VertexID: "v", SubtaskIndex: 0, Attempt: attempt, Epoch: epoch, Time: at(when)}
	if event == "stop" {
		r.State = "FINISHED"
	}
	return r
}

// logOf encodes records as a TaskExecutor writes them.
func logOf(t *testing.T, records ...taskexecutor.AttemptRecord) string {
	t.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	for _, r := range records {
		if err := enc.Encode(r); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

// attemptsOf reads the logs, each ending at end.
func attemptsOf(t *testing.T, end time.Time, logs ...string) []Attempt {
	t.Helper()
	var all []Attempt
	for _, l := range logs {
		as, err := ReadAttemptLog(strings.NewReader(l), end)
		if err != nil {
			t.Fatalf("ReadAttemptLog: %v", err)
		}
		all = append(all, as...)
	}
	return all
}

func TestReadAttemptLogPairsStartsAndStops(t *testing.T) {
	t.Parallel()
	other := rec("start", "te1", 0, 1, 1.5)
	other.SubtaskIndex = 1
	log := logOf(t,
		rec("start", "te1", 0, 1, 1),
		other,
		rec("stop", "te1", 0, 1, 2),
	) + `{"event":"stop","task_ex` // torn by a kill
	as := attemptsOf(t, at(10), log)
	if len(as) != 2 {
		t.Fatalf("ReadAttemptLog = %v, want 2 attempts", as)
	}
	if a := as[0]; !a.Stopped || a.State != "FINISHED" || !a.Start.Equal(at(1)) || !a.Stop.Equal(at(2)) || a.Epoch != 1 || a.TaskExecutor != "te1" {
		t.Errorf("first attempt = %v, want te1 epoch 1 from 1s to 2s FINISHED", a)
	}
	if a := as[1]; a.Stopped || a.Subtask != 1 || !a.Stop.Equal(at(10)) {
		t.Errorf("second attempt = %v, want subtask 1 running until the end given", a)
	}
}

func TestReadAttemptLogRefusesAMalformedLog(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, log string }{
		{"garbage before the last line", "not json\n" + logOf(t, rec("start", "te1", 0, 1, 1))},
		{"stop without start", logOf(t, rec("stop", "te1", 0, 1, 1))},
		{"two starts", logOf(t, rec("start", "te1", 0, 1, 1), rec("start", "te1", 0, 1, 2))},
		{"unknown event", strings.Replace(logOf(t, rec("start", "te1", 0, 1, 1)), `"start"`, `"begin"`, 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if as, err := ReadAttemptLog(strings.NewReader(tc.log), at(10)); err == nil {
				t.Errorf("ReadAttemptLog = %v, nil; want an error", as)
			}
		})
	}
}

func TestCheckAttempts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		logs []string
		want string // in the error; empty: no error
	}{
		{"one attempt after another, across JobMasters and TaskExecutors", []string{
			logOf(t, rec("start", "te1", 0, 1, 1), rec("stop", "te1", 0, 1, 2), rec("start", "te1", 2, 2, 5)),
			logOf(t, rec("start", "te2", 1, 2, 2), rec("stop", "te2", 1, 2, 3)),
		}, ""},
		{"other subtasks at once", []string{
			logOf(t, rec("start", "te1", 0, 1, 1), rec("stop", "te1", 0, 1, 5)),
			strings.ReplaceAll(logOf(t, rec("start", "te2", 0, 1, 2), rec("stop", "te2", 0, 1, 3)), `"vertex_id":"v"`, `"vertex_id":"w"`),
			strings.ReplaceAll(logOf(t, rec("start", "te2", 0, 1, 2), rec("stop", "te2", 0, 1, 3)), `"job_id":"j"`, `"job_id":"k"`),
		}, ""},
		{"under two JobMasters at once", []string{
			logOf(t, rec("start", "te1", 0, 1, 1), rec("stop", "te1", 0, 1, 4)),
			logOf(t, rec("start", "te2", 0, 2, 3), rec("stop", "te2", 0, 2, 5)),
		}, "under two JobMasters"},
		{"under two JobMasters on one TaskExecutor", []string{
			logOf(t, rec("start", "te1", 0, 1, 1), rec("start", "te1", 0, 2, 2), rec("stop", "te1", 0, 2, 3), rec("stop", "te1", 0, 1, 4)),
		}, "under two JobMasters"},
		{"an attempt never stopped overlaps a later one", []string{
			logOf(t, rec("start", "te1", 0, 1, 1)),
			logOf(t, rec("start", "te2", 1, 2, 8), rec("stop", "te2", 1, 2, 9)),
		}, "under two JobMasters"},
		{"twice under one JobMaster", []string{
			logOf(t, rec("start", "te1", 0, 1, 1), rec("stop", "te1", 0, 1, 4)),
			logOf(t, rec("start", "te2", 1, 1, 3), rec("stop", "te2", 1, 1, 5)),
		}, "twice under one JobMaster"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckAttempts(attemptsOf(t, at(10), tc.logs...))
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("CheckAttempts = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("CheckAttempts = %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

package chaos

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jobplane/jobplane/sdk/taskexecutor"
	"github.com/jobplane/jobplane/server/localcluster"
)

var t0 = time.Date(2026, 12, 1, 16, 0, 0, 0, time.UTC)

// at is t0 plus s seconds.
func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

// rec is one attempt-log record of subtask j/v/0 on TaskExecutor te.
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

// attemptsOf reads the logs of processes that live on.
func attemptsOf(t *testing.T, logs ...string) []Interval {
	t.Helper()
	var all []Interval
	for _, l := range logs {
		ivs, err := ReadAttemptLog(strings.NewReader(l), "te", nil)
		if err != nil {
			t.Fatalf("ReadAttemptLog: %v", err)
		}
		all = append(all, ivs...)
	}
	return all
}

// wantCheck fails t unless err, from CheckAttempts, is nil for an empty
// want and otherwise an error that says want.
func wantCheck(t *testing.T, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Errorf("CheckAttempts = %v, want nil", err)
	case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
		t.Errorf("CheckAttempts = %v, want an error saying %q", err, want)
	}
}

func TestCheckAttempts(t *testing.T) {
	t.Parallel()
	iv := func(epoch uint64, attempt int, start, stop float64) Interval {
		v := Interval{JobID: "j", VertexID: "v", Epoch: epoch, Attempt: attempt, Start: at(start)}
		if stop >= 0 {
			v.Stop = at(stop)
		}
		return v
	}
	for _, tc := range []struct {
		name string
		ivs  []Interval
		want string // in the error; "" for none
	}{
		{"one after the other", []Interval{iv(1, 0, 0, 5), iv(2, 0, 5, 9), iv(2, 1, 9, -1)}, ""},
		{"two JobMasters", []Interval{iv(1, 0, 0, 5), iv(2, 0, 4, 9)}, "under two JobMasters"},
		{"one JobMaster twice", []Interval{iv(1, 0, 0, 5), iv(1, 1, 3, 4)}, "twice under one JobMaster"},
		{"still running", []Interval{iv(1, 0, 0, -1), iv(2, 0, 7, 9)}, "under two JobMasters"},
		{"other subtasks", []Interval{iv(1, 0, 0, 5), func() Interval { v := iv(2, 0, 1, 3); v.SubtaskIndex = 1; return v }()}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantCheck(t, CheckAttempts(tc.ivs), tc.want)
		})
	}
}

// The check over attempts read from the logs of several TaskExecutors.
func TestCheckAttemptLogs(t *testing.T) {
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
			wantCheck(t, CheckAttempts(attemptsOf(t, tc.logs...)), tc.want)
		})
	}
}

// An attempt log's attempts, the last left running when its TaskExecutor
// died, which ends it; the torn last line a kill left is passed over.
func TestReadAttemptLog(t *testing.T) {
	t.Parallel()
	other := rec("start", "te1", 0, 7, 2)
	other.SubtaskIndex = 1
	log := logOf(t, rec("start", "te1", 0, 7, 1), other, rec("stop", "te1", 0, 7, 3)) + `{"event":"start","task_exec`
	died := at(9)
	ivs, err := ReadAttemptLog(strings.NewReader(log), "te-0", []localcluster.ProcessRun{{Start: at(-60), Exit: died}})
	if err != nil {
		t.Fatal(err)
	}
	if len(ivs) != 2 {
		t.Fatalf("got %d attempts, want 2: %v", len(ivs), ivs)
	}
	if iv := ivs[0]; iv.State != "FINISHED" || !iv.Start.Equal(at(1)) || !iv.Stop.Equal(at(3)) || iv.Epoch != 7 || iv.TaskExecutor != "te1" || iv.Process != "te-0" {
		t.Errorf("first attempt = %v, want te1 (te-0) epoch 7 from 1s to 3s FINISHED", iv)
	}
	if iv := ivs[1]; iv.State != "" || iv.SubtaskIndex != 1 || !iv.Stop.Equal(died) {
		t.Errorf("second attempt = %v, want subtask 1 stopped when its TaskExecutor died", iv)
	}

	// The same log of a TaskExecutor that lives on: the second attempt
	// still runs.
	ivs, err = ReadAttemptLog(strings.NewReader(log), "te-0", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(ivs) != 2 || !ivs[1].Stop.IsZero() {
		t.Errorf("attempts of a live TaskExecutor = %v, want the second still running", ivs)
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
			if ivs, err := ReadAttemptLog(strings.NewReader(tc.log), "te", nil); err == nil {
				t.Errorf("ReadAttemptLog = %v, nil; want an error", ivs)
			}
		})
	}
}

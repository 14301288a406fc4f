package hacluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestCheckAttempts(t *testing.T) {
	at := func(s int) time.Time { return time.Unix(1000+int64(s), 0) }
	iv := func(epoch uint64, attempt, start, stop int) Interval {
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
			err := CheckAttempts(tc.ivs)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("CheckAttempts = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("CheckAttempts = %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// An attempt log's attempts, the last left running when its TaskExecutor
// died, which ends it.
func TestReadAttemptLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "attempts.jsonl")
	log := `{"event":"start","task_executor":"te","job_id":"j","vertex_id":"v","subtask_index":0,"attempt":0,"epoch":7,"time":"2026-01-01T00:00:01Z"}
{"event":"start","task_executor":"te","job_id":"j","vertex_id":"v","subtask_index":1,"attempt":0,"epoch":7,"time":"2026-01-01T00:00:02Z"}
{"event":"stop","task_executor":"te","job_id":"j","vertex_id":"v","subtask_index":0,"attempt":0,"epoch":7,"state":"FINISHED","time":"2026-01-01T00:00:03Z"}
{"event":"start","task_exec`
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	died := time.Date(2026, 1, 1, 0, 0, 9, 0, time.UTC)
	ivs, err := readAttemptLog("te-0", path, []Run{{Start: died.Add(-time.Minute), Exit: died}})
	if err != nil {
		t.Fatal(err)
	}
	if len(ivs) != 2 {
		t.Fatalf("got %d attempts, want 2: %v", len(ivs), ivs)
	}
	if ivs[0].State != "FINISHED" || !ivs[0].Stop.Equal(time.Date(2026, 1, 1, 0, 0, 3, 0, time.UTC)) || ivs[0].Epoch != 7 {
		t.Errorf("first attempt = %v", ivs[0])
	}
	if ivs[1].State != "" || !ivs[1].Stop.Equal(died) {
		t.Errorf("second attempt = %v, want it stopped when its TaskExecutor died", ivs[1])
	}
}

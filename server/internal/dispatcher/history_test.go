package dispatcher

import (
	"fmt"
	"strings"
	"testing"
	"time"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/wire/jobstatus"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func summary(status jobplanev1.JobStatus, restarts int32) *jobplanev1.JobSummary {
	return &jobplanev1.JobSummary{Status: status, RestartCount: restarts}
}

// describe lists the changes of h as seq:STATUS/restarts.
func describe(cs []change) string {
	var out []string
	for _, c := range cs {
		out = append(out, fmt.Sprintf("%d:%v/%d", c.seq, strings.TrimPrefix(c.summary.GetStatus().String(), "JOB_STATUS_"), c.summary.GetRestartCount()))
	}
	return fmt.Sprint(out)
}

// A history numbers status changes and restarts; a restart replaces the
// restart recorded just before it, under a new number; a summary that
// changes neither only refreshes the current one.
func TestHistoryRecord(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		records []*jobplanev1.JobSummary // after INITIALIZING/0
		changed []bool
		want    string
	}{
		{"status changes", []*jobplanev1.JobSummary{summary(jobstatus.Running, 0), summary(jobstatus.Restarting, 1), summary(jobstatus.Running, 1)},
			[]bool{true, true, true}, "[0:INITIALIZING/0 1:RUNNING/0 2:RESTARTING/1 3:RUNNING/1]"},
		{"a refresh", []*jobplanev1.JobSummary{summary(jobstatus.Running, 0), summary(jobstatus.Running, 0)},
			[]bool{true, false}, "[0:INITIALIZING/0 1:RUNNING/0]"},
		{"restarts replace each other", []*jobplanev1.JobSummary{summary(jobstatus.Running, 0), summary(jobstatus.Running, 1), summary(jobstatus.Running, 2), summary(jobstatus.Running, 3)},
			[]bool{true, true, true, true}, "[0:INITIALIZING/0 1:RUNNING/0 4:RUNNING/3]"},
		{"a status change between restarts", []*jobplanev1.JobSummary{summary(jobstatus.Running, 0), summary(jobstatus.Running, 1), summary(jobstatus.Cancelling, 1), summary(jobstatus.Cancelling, 2)},
			[]bool{true, true, true, true}, "[0:INITIALIZING/0 1:RUNNING/0 2:RUNNING/1 3:CANCELLING/1 4:CANCELLING/2]"},
		{"a new JobMaster's lower count", []*jobplanev1.JobSummary{summary(jobstatus.Running, 5), summary(jobstatus.Running, 0), summary(jobstatus.Running, 1)},
			[]bool{true, false, true}, "[0:INITIALIZING/0 1:RUNNING/0 2:RUNNING/1]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHistory(summary(jobstatus.Initializing, 0))
			for i, s := range tc.records {
				if got := h.record(s); got != tc.changed[i] {
					t.Errorf("record %d (%v) = %v, want %v", i, s, got, tc.changed[i])
				}
			}
			if got := describe(h.changes); got != tc.want {
				t.Errorf("history %s, want %s", got, tc.want)
			}
		})
	}
}

// A crash loop adds one change however long it lasts, and a watch
// that was sent any of its restarts, or none, resumes to the newest.
func TestHistoryCrashLoop(t *testing.T) {
	t.Parallel()
	h := newHistory(summary(jobstatus.Initializing, 0))
	h.record(summary(jobstatus.Running, 0))
	for n := int32(1); n <= 10_000; n++ {
		h.record(summary(jobstatus.Running, n))
	}
	if len(h.changes) != 3 || h.latest().GetRestartCount() != 10_000 {
		t.Fatalf("after 10,000 restarts: %s", describe(h.changes))
	}
	for _, seen := range []int{1, 2, 500, h.end() - 2} {
		s, ok := h.at(seen)
		next := h.since(seen + 1)
		if !ok || s.GetStatus() != jobstatus.Running || len(next) != 1 || next[0].summary.GetRestartCount() != 10_000 {
			t.Errorf("resumed after %d: at = %v, %v; then %s; want RUNNING, then the newest restart", seen, s, ok, describe(next))
		}
	}
	if _, ok := h.at(h.end()); ok {
		t.Errorf("at(end) is kept")
	}
	// Status changes are bounded by maxHistory.
	for i := range 2 * maxHistory {
		h.record(summary([]jobplanev1.JobStatus{jobstatus.Restarting, jobstatus.Running}[i%2], 10_000+int32(i/2)))
	}
	if len(h.changes) != maxHistory {
		t.Errorf("after %d status changes: %d kept, want %d", 2*maxHistory, len(h.changes), maxHistory)
	}
}

// A job made from its plan keeps no summary until it changes: its first
// one, INITIALIZING, is built when asked for, the same each time, and
// becomes change 0 of its history at its first change, so that a watch
// resumed after it goes on.
func TestFirstSummaryBuiltWhenAskedFor(t *testing.T) {
	t.Parallel()
	_, ld := newTestLeadership(t)
	submitted := time.Date(2026, 12, 4, 10, 0, 0, 123, time.UTC)
	before := time.Now()
	j := newJob(&hastorev1.ExecutionPlan{
		JobId: "j", RunId: "r1", SubmittedBy: "alice", SubmitTime: timestamppb.New(submitted),
		JobGraph: &jobplanev1.JobGraph{Name: "named"},
	})
	if j.history.changes != nil {
		t.Fatalf("a new job keeps its history %s; want none until it changes", describe(j.history.changes))
	}
	first := j.latest()
	want := &jobplanev1.JobSummary{JobId: "j", Name: "named", Status: jobstatus.Initializing, SubmitTime: timestamppb.New(submitted),
		StatusTime: first.GetStatusTime(), SubmittedBy: "alice", RunId: "r1"}
	if !proto.Equal(first, want) {
		t.Errorf("first summary %v, want %v", first, want)
	}
	if st := first.GetStatusTime().AsTime(); st.Before(before) || st.After(time.Now()) {
		t.Errorf("first summary's status time %v, want the job's creation (after %v)", st, before)
	}
	if again := j.latest(); !proto.Equal(again, first) {
		t.Errorf("first summary asked for again: %v, want %v", again, first)
	}
	if st := j.status(); st != jobstatus.Initializing {
		t.Errorf("status of a new job %v, want INITIALIZING", st)
	}
	if got := j.hist().end(); got != 1 {
		t.Errorf("end of an unchanged job's history %d, want 1", got)
	}
	ld.recordLocked(j, &jobplanev1.JobSummary{JobId: "j", Status: jobstatus.Running})
	if got := describe(j.history.changes); got != "[0:INITIALIZING/0 1:RUNNING/0]" {
		t.Fatalf("history after the first change %s, want INITIALIZING then RUNNING", got)
	}
	if at0, ok := j.hist().at(0); !ok || !proto.Equal(at0, first) {
		t.Errorf("change 0 after the first change: %v, %v; want the first summary %v", at0, ok, first)
	}
}

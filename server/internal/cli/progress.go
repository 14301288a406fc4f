package cli

import (
	"fmt"
	"io"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk"
)

// progressLines renders a followed job for the live display: its status,
// elapsed time and restarts, its subtasks by state, and its last failure
// while it has one.
func progressLines(s *jobplanev1.JobSummary, now time.Time) []string {
	head := "job " + s.GetJobId()
	if s.GetName() != "" {
		head += " (" + s.GetName() + ")"
	}
	lines := []string{
		head,
		fmt.Sprintf("status: %s   elapsed: %s   restarts: %d", statusName(s.GetStatus()), elapsed(s, now), s.GetRestartCount()),
	}
	if n := total(s.GetTaskCounts()); n > 0 {
		lines = append(lines, fmt.Sprintf("subtasks: %s (%d in all)", countsText(s.GetTaskCounts()), n))
	}
	if f := s.GetFailure(); f != nil {
		lines = append(lines, "last failure: "+failureText(f))
	}
	return lines
}

// statusLine renders one change of a followed job for output that is not
// a terminal: one line, no redraw. prev is the summary of the line before
// (nil for the first). A restart that left the status as it was (a region
// restart while RUNNING) says how many restarts there were and why the
// last one happened, at the time of that failure; restarts that came
// faster than the job was watched are counted in one line.
func statusLine(prev, s *jobplanev1.JobSummary) string {
	if prev != nil && s.GetStatus() == prev.GetStatus() && s.GetRestartCount() > prev.GetRestartCount() {
		at := s.GetStatusTime()
		if t := s.GetFailure().GetTime(); t != nil {
			at = t
		}
		line := fmt.Sprintf("%s job %s %s  %s", timeText(at), s.GetJobId(), statusName(s.GetStatus()), restartedText(s.GetRestartCount()))
		if f := s.GetFailure(); f != nil {
			line += "; last failure: " + failureText(f)
		}
		return line
	}
	line := fmt.Sprintf("%s job %s %s  subtasks: %s  restarts: %d", timeText(s.GetStatusTime()), s.GetJobId(),
		statusName(s.GetStatus()), countsText(s.GetTaskCounts()), s.GetRestartCount())
	if f := s.GetFailure(); f != nil && s.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_RUNNING {
		line += "  failure: " + failureText(f)
	}
	return line
}

// restartedText says how often a job restarted, such as "restarted 3
// times".
func restartedText(n int32) string {
	if n == 1 {
		return "restarted once"
	}
	return fmt.Sprintf("restarted %d times", n)
}

// liveView redraws a block of lines in place on a terminal with ANSI
// cursor movement: no color, no animation beyond the redraw.
type liveView struct {
	w     io.Writer
	width func() int // the terminal's columns now (it may be resized)
	drawn int        // lines on screen from the last draw
}

// draw replaces the block last drawn with lines, each cut to the
// terminal's width.
func (v *liveView) draw(lines []string) {
	var b strings.Builder
	if v.drawn > 0 {
		fmt.Fprintf(&b, "\x1b[%dA", v.drawn)
	}
	b.WriteString("\r\x1b[J")
	width := v.width()
	for _, l := range lines {
		b.WriteString(cut(l, width-1))
		b.WriteString("\n")
	}
	io.WriteString(v.w, b.String())
	v.drawn = len(lines)
}

// forget makes the next draw start below what is on screen, as after a
// prompt that moved the cursor.
func (v *liveView) forget() { v.drawn = 0 }

// cut shortens s to at most n runes, marking the cut with "…".
func cut(s string, n int) string {
	if n <= 0 {
		return s
	}
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// jobView is what the attached display knows of a job: the newest
// summary from the status stream, with subtask counts refreshed from
// the job's details in between.
type jobView struct {
	cur *jobplanev1.JobSummary
}

// update merges s into the view and reports whether the status changed.
// A summary older than the one held (by status time) only refreshes the
// counts and restarts; a status never goes back from globally terminal.
func (v *jobView) update(s *jobplanev1.JobSummary) (statusChanged bool) {
	if v.cur == nil {
		v.cur = proto.CloneOf(s)
		return true
	}
	older := s.GetStatusTime().AsTime().Before(v.cur.GetStatusTime().AsTime()) || terminal(v.cur.GetStatus())
	if older {
		if s.GetStatus() == v.cur.GetStatus() {
			v.cur.TaskCounts = s.GetTaskCounts()
		}
		return false
	}
	changed := s.GetStatus() != v.cur.GetStatus() || s.GetRestartCount() != v.cur.GetRestartCount()
	prev := v.cur
	v.cur = proto.CloneOf(s)
	if s.GetStatus() == jobplanev1.JobStatus_JOB_STATUS_FINISHED && len(s.GetTaskCounts()) == 0 && total(prev.GetTaskCounts()) > 0 {
		// An ended job's summary may come without counts; a finished
		// job's subtasks all finished.
		v.cur.TaskCounts = []*jobplanev1.ExecutionStateCount{{State: jobplanev1.ExecutionState_EXECUTION_STATE_FINISHED, Count: int32(total(prev.GetTaskCounts()))}}
	}
	return changed
}

// terminal reports whether s is a globally terminal job status: the job
// ends there and never runs again.
func terminal(s jobplanev1.JobStatus) bool { return sdk.IsGloballyTerminal(s) }

package chaos

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/jobplane/jobplane/server/taskexecutor"
)

// Attempt is one execution attempt as a TaskExecutor's attempt log tells
// it: it ran from Start to Stop.
type Attempt struct {
	// TaskExecutor, JobID, VertexID, Subtask and Number identify the
	// attempt; Epoch is the epoch of the token of the JobMaster that
	// deployed it.
	TaskExecutor string
	JobID        string
	VertexID     string
	Subtask      int
	Number       int
	Epoch        uint64
	// Start is when its invokable was called; Stop when it returned, or,
	// for an attempt whose stop the log does not have, the end given to
	// ReadAttemptLog.
	Start, Stop time.Time
	// Stopped says whether the log has its stop; State is then its
	// terminal state (FINISHED, FAILED or CANCELED).
	Stopped bool
	State   string
}

// String renders the attempt on one line.
func (a Attempt) String() string {
	stop := a.Stop.Format(time.RFC3339Nano)
	if !a.Stopped {
		stop += " (no stop logged)"
	} else {
		stop += " " + a.State
	}
	return fmt.Sprintf("%s/%s[%d] attempt %d epoch %d on %s: %s..%s",
		a.JobID, a.VertexID, a.Subtask, a.Number, a.Epoch, a.TaskExecutor, a.Start.Format(time.RFC3339Nano), stop)
}

// attemptKey identifies an attempt within one TaskExecutor's log.
type attemptKey struct {
	te, job, vertex string
	subtask, number int
	epoch           uint64
}

// ReadAttemptLog reads a TaskExecutor's attempt log (the JSON lines of
// taskexecutor.AttemptRecord that `jobplane taskexecutor --attempt-log`
// writes) and pairs each start with its stop. An attempt started and not
// stopped in the log is taken to run until end: pass the time the
// TaskExecutor process was seen dead, or the end of the test while it
// lives. A torn last line (a process killed mid-write) is ignored; any
// other malformed line, or a stop without its start, is an error.
func ReadAttemptLog(r io.Reader, end time.Time) ([]Attempt, error) {
	var lines []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("chaos: reading an attempt log: %w", err)
	}
	open := make(map[attemptKey]int)
	var out []Attempt
	for i, line := range lines {
		if strings.TrimSpace(line) == "" {
			continue
		}
		var rec taskexecutor.AttemptRecord
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			if i == len(lines)-1 {
				break
			}
			return nil, fmt.Errorf("chaos: attempt log line %d: %w", i+1, err)
		}
		k := attemptKey{rec.TaskExecutor, rec.JobID, rec.VertexID, rec.SubtaskIndex, rec.Attempt, rec.Epoch}
		switch rec.Event {
		case "start":
			if _, dup := open[k]; dup {
				return nil, fmt.Errorf("chaos: attempt log line %d: a second start of a running attempt", i+1)
			}
			open[k] = len(out)
			out = append(out, Attempt{
				TaskExecutor: rec.TaskExecutor, JobID: rec.JobID, VertexID: rec.VertexID, Subtask: rec.SubtaskIndex,
				Number: rec.Attempt, Epoch: rec.Epoch, Start: rec.Time, Stop: end,
			})
		case "stop":
			j, ok := open[k]
			if !ok {
				return nil, fmt.Errorf("chaos: attempt log line %d: a stop without its start", i+1)
			}
			delete(open, k)
			out[j].Stop, out[j].Stopped, out[j].State = rec.Time, true, rec.State
		default:
			return nil, fmt.Errorf("chaos: attempt log line %d: unknown event %q", i+1, rec.Event)
		}
	}
	return out, nil
}

// CheckAttempts checks that no subtask ran twice at the same time, across
// the attempts of every TaskExecutor: neither under two JobMasters (two
// epochs) nor twice under one. It returns nil, or an error that lists
// every pair of attempts of one subtask whose runs overlap. Runs that
// only touch (one stops the instant the other starts) do not overlap.
func CheckAttempts(attempts []Attempt) error {
	type subtask struct {
		job, vertex string
		index       int
	}
	bySubtask := make(map[subtask][]Attempt)
	for _, a := range attempts {
		k := subtask{a.JobID, a.VertexID, a.Subtask}
		bySubtask[k] = append(bySubtask[k], a)
	}
	var problems []string
	for _, as := range bySubtask {
		sort.Slice(as, func(i, j int) bool { return as[i].Start.Before(as[j].Start) })
		for i := range as {
			// as is sorted by start: every later attempt that starts
			// before as[i] stops overlaps it.
			for j := i + 1; j < len(as) && as[j].Start.Before(as[i].Stop); j++ {
				what := "twice under one JobMaster"
				if as[i].Epoch != as[j].Epoch {
					what = "under two JobMasters"
				}
				problems = append(problems, fmt.Sprintf("subtask ran %s at once:\n  %s\n  %s", what, as[i], as[j]))
			}
		}
	}
	if len(problems) == 0 {
		return nil
	}
	sort.Strings(problems)
	return errors.New("chaos: " + strings.Join(problems, "\nchaos: "))
}

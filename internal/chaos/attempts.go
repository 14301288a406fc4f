package chaos

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"time"

	"github.com/jobplane/jobplane/sdk/taskexecutor"
	"github.com/jobplane/jobplane/server/localcluster"
)

// Interval is one execution attempt as a TaskExecutor's attempt log
// recorded it: from its "start" record to its "stop" record or, without
// one, to the exit of the TaskExecutor's run that started it (zero Stop:
// that run still runs). ReadAttemptLog reads them, CheckAttempts checks
// them.
type Interval struct {
	// Process names the TaskExecutor process, TaskExecutor its id.
	Process, TaskExecutor string
	// JobID, VertexID, SubtaskIndex and Attempt identify the attempt.
	JobID        string
	VertexID     string
	SubtaskIndex int
	Attempt      int
	// Epoch is the epoch of the token of the JobMaster that deployed it.
	Epoch uint64
	// Start and Stop bound the attempt's run; Stop is zero while it runs.
	Start, Stop time.Time
	// State is the "stop" record's terminal state; empty without one.
	State string
}

// Subtask names the interval's subtask: "job/vertex/index".
func (iv Interval) Subtask() string {
	return fmt.Sprintf("%s/%s/%d", iv.JobID, iv.VertexID, iv.SubtaskIndex)
}

// String describes the interval on one line.
func (iv Interval) String() string {
	stop := "running"
	if !iv.Stop.IsZero() {
		stop = iv.Stop.Format("15:04:05.000000")
	}
	return fmt.Sprintf("%s attempt %d epoch %d on %s: %s – %s %s", iv.Subtask(), iv.Attempt, iv.Epoch, iv.Process,
		iv.Start.Format("15:04:05.000000"), stop, iv.State)
}

// overlaps reports whether the two intervals share an instant; a zero Stop
// is open-ended.
func (iv Interval) overlaps(o Interval) bool {
	return (iv.Stop.IsZero() || o.Start.Before(iv.Stop)) && (o.Stop.IsZero() || iv.Start.Before(o.Stop))
}

// Attempts reads the attempt log of every TaskExecutor process of a
// cluster and returns its attempts, ordered by start. A TaskExecutor
// that has not written its log yet has no attempts.
func Attempts(tes []*localcluster.TaskExecutorProcess) ([]Interval, error) {
	var all []Interval
	for _, te := range tes {
		f, err := os.Open(te.AttemptLog())
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		ivs, err := ReadAttemptLog(f, te.Name, te.Runs())
		f.Close()
		if err != nil {
			return nil, err
		}
		all = append(all, ivs...)
	}
	slices.SortFunc(all, func(a, b Interval) int { return a.Start.Compare(b.Start) })
	return all, nil
}

// attemptKey identifies one attempt on one TaskExecutor.
type attemptKey struct {
	te, job, vertex  string
	subtask, attempt int
	epoch            uint64
}

// ReadAttemptLog reads the attempt log of the TaskExecutor process named
// process (the JSON lines of taskexecutor.AttemptRecord that `jobplane
// taskexecutor --attempt-log` writes) and pairs each start with its stop,
// in the order of the starts. runs are the process's runs: an attempt
// without a stop record ran until the exit of the run it started in, and
// is still running (zero Stop) if that run has not exited or is not among
// runs (pass nil for a process that lives on). A torn last line (a
// process killed mid-write) is ignored; any other malformed line, a
// second start of a running attempt, a stop without its start or an
// unknown event is an error.
func ReadAttemptLog(r io.Reader, process string, runs []localcluster.ProcessRun) ([]Interval, error) {
	var lines [][]byte
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, slices.Clone(sc.Bytes()))
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("chaos: reading the attempt log of %s: %w", process, err)
	}
	var out []Interval
	open := map[attemptKey]int{}
	for i, line := range lines {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var rec taskexecutor.AttemptRecord
		if err := json.Unmarshal(line, &rec); err != nil {
			if i == len(lines)-1 {
				break
			}
			return nil, fmt.Errorf("chaos: attempt log of %s, line %d: %w", process, i+1, err)
		}
		k := attemptKey{rec.TaskExecutor, rec.JobID, rec.VertexID, rec.SubtaskIndex, rec.Attempt, rec.Epoch}
		switch rec.Event {
		case "start":
			if _, dup := open[k]; dup {
				return nil, fmt.Errorf("chaos: attempt log of %s, line %d: a second start of a running attempt: %s", process, i+1, line)
			}
			open[k] = len(out)
			out = append(out, Interval{
				Process: process, TaskExecutor: rec.TaskExecutor, JobID: rec.JobID, VertexID: rec.VertexID,
				SubtaskIndex: rec.SubtaskIndex, Attempt: rec.Attempt, Epoch: rec.Epoch, Start: rec.Time,
			})
		case "stop":
			j, ok := open[k]
			if !ok {
				return nil, fmt.Errorf("chaos: attempt log of %s, line %d: a stop without its start: %s", process, i+1, line)
			}
			delete(open, k)
			out[j].Stop, out[j].State = rec.Time, rec.State
		default:
			return nil, fmt.Errorf("chaos: attempt log of %s, line %d: unknown event %q", process, i+1, rec.Event)
		}
	}
	for _, j := range open {
		for _, run := range runs {
			if !run.Exit.IsZero() && run.Exit.After(out[j].Start) && !run.Start.After(out[j].Start) {
				out[j].Stop = run.Exit
				break
			}
		}
	}
	return out, nil
}

// CheckAttempts checks that no subtask ran twice at once: no two attempts
// of one (job, vertex, subtask) overlap in time, across every
// TaskExecutor, whether under different JobMaster tokens (epochs) or under
// the same one. Attempts that only touch (one stops the instant the other
// starts) do not overlap; one still running (zero Stop) overlaps every
// later one. It returns an error listing every overlapping pair, or nil.
func CheckAttempts(ivs []Interval) error {
	by := map[string][]Interval{}
	for _, iv := range ivs {
		by[iv.Subtask()] = append(by[iv.Subtask()], iv)
	}
	var errs []error
	for _, subtask := range slices.Sorted(maps.Keys(by)) {
		list := by[subtask]
		slices.SortFunc(list, func(a, b Interval) int { return a.Start.Compare(b.Start) })
		for i, a := range list {
			for _, b := range list[i+1:] {
				if a.overlaps(b) {
					what := "under two JobMasters"
					if a.Epoch == b.Epoch {
						what = "twice under one JobMaster"
					}
					errs = append(errs, fmt.Errorf("%s ran %s at once:\n  %v\n  %v", subtask, what, a, b))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// Epochs returns the JobMaster epochs of the attempts that started before
// t, by job: the tokens the jobs ran under until then.
func Epochs(ivs []Interval, before time.Time) map[string]map[uint64]bool {
	out := map[string]map[uint64]bool{}
	for _, iv := range ivs {
		if !iv.Start.Before(before) {
			continue
		}
		if out[iv.JobID] == nil {
			out[iv.JobID] = map[uint64]bool{}
		}
		out[iv.JobID][iv.Epoch] = true
	}
	return out
}

package hacluster

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/jobplane/jobplane/server/taskexecutor"
)

// Interval is one execution attempt as a TaskExecutor's attempt log
// recorded it: from its "start" record to its "stop" record or, without
// one, to the exit of the TaskExecutor's run that started it (zero Stop:
// that run still runs).
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

// Attempts reads every TaskExecutor's attempt log and returns its
// attempts, ordered by start.
func (c *Cluster) Attempts() ([]Interval, error) {
	var all []Interval
	for _, te := range c.TaskExecutors {
		ivs, err := readAttemptLog(te.Name, te.AttemptLog, te.Runs())
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

// readAttemptLog reads one attempt log; runs are its process's runs, which
// end the attempts left without a stop record.
func readAttemptLog(process, path string, runs []Run) ([]Interval, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Interval
	open := map[attemptKey]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for line := 1; sc.Scan(); line++ {
		var r taskexecutor.AttemptRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			// A process killed in mid-write leaves a torn last line.
			continue
		}
		k := attemptKey{r.TaskExecutor, r.JobID, r.VertexID, r.SubtaskIndex, r.Attempt, r.Epoch}
		switch r.Event {
		case "start":
			open[k] = len(out)
			out = append(out, Interval{
				Process: process, TaskExecutor: r.TaskExecutor, JobID: r.JobID, VertexID: r.VertexID,
				SubtaskIndex: r.SubtaskIndex, Attempt: r.Attempt, Epoch: r.Epoch, Start: r.Time,
			})
		case "stop":
			i, ok := open[k]
			if !ok {
				return nil, fmt.Errorf("%s line %d: stop of an attempt that did not start: %s", path, line, sc.Bytes())
			}
			delete(open, k)
			out[i].Stop, out[i].State = r.Time, r.State
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	// An attempt without a stop record ran until its TaskExecutor exited.
	for _, i := range open {
		for _, run := range runs {
			if !run.Exit.IsZero() && run.Exit.After(out[i].Start) && !run.Start.After(out[i].Start) {
				out[i].Stop = run.Exit
				break
			}
		}
	}
	return out, nil
}

// CheckAttempts checks that no subtask ran twice at once: no two attempts
// of one (job, vertex, subtask) overlap in time, whether under different
// JobMaster tokens (epochs) or under the same one. It returns an error
// listing every overlapping pair, or nil.
func CheckAttempts(ivs []Interval) error {
	by := map[string][]Interval{}
	for _, iv := range ivs {
		by[iv.Subtask()] = append(by[iv.Subtask()], iv)
	}
	var errs []error
	for _, list := range by {
		slices.SortFunc(list, func(a, b Interval) int { return a.Start.Compare(b.Start) })
		for i, a := range list {
			for _, b := range list[i+1:] {
				if a.overlaps(b) {
					what := "under two JobMasters"
					if a.Epoch == b.Epoch {
						what = "twice under one JobMaster"
					}
					errs = append(errs, fmt.Errorf("%s ran %s at once:\n  %v\n  %v", a.Subtask(), what, a, b))
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

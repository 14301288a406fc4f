package dispatcher

import (
	"fmt"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/jobgraph"
)

// Cluster limits. The leadership counts its live jobs (accepted, or being
// persisted, and not yet globally terminal) and their subtasks: a job
// counts from when a submission takes its id (so that concurrent
// submissions cannot together overshoot) until its result is recorded,
// or its submission failed. A leader rebuilds the counts from the store
// as it recovers: every recovered job counts, even over the limits (it
// was accepted once, and runs), and holds new ones off until enough end.

// LimitError says that a new job would take the cluster's live jobs, or
// their subtasks, over the cluster's limit.
type LimitError struct {
	// JobID is the refused job's id.
	JobID string
	// Subtasks is false when the job limit refused it (Limit jobs live),
	// true when the subtask limit did (Limit subtasks in all).
	Subtasks bool
	// Limit is the limit that refused the job.
	Limit int
	// JobSubtasks is the refused job's subtasks, and LiveSubtasks the live
	// jobs' when it was refused.
	JobSubtasks, LiveSubtasks int
}

func (e *LimitError) Error() string {
	if e.Subtasks {
		return fmt.Sprintf("dispatcher: job %s has %d subtasks; with the live jobs' %d, that is over the cluster's limit of %d subtasks; submit it again once jobs end",
			e.JobID, e.JobSubtasks, e.LiveSubtasks, e.Limit)
	}
	return fmt.Sprintf("dispatcher: the live jobs are at the cluster's limit of %d; job %s was refused", e.Limit, e.JobID)
}

// admitLocked counts j, whose graph is graph, as live, unless a limit
// refuses it (check) with a *LimitError; d.mu must be held.
func (d *Dispatcher) admitLocked(ld *leadership, j *job, graph *jobplanev1.JobGraph, check bool) error {
	n := jobgraph.Subtasks(graph)
	if check {
		if max := d.cfg.MaxJobs; max > 0 && ld.liveJobs >= max {
			return &LimitError{JobID: j.id, Limit: max, JobSubtasks: n, LiveSubtasks: ld.liveSubtasks}
		}
		if max := d.cfg.MaxClusterSubtasks; max > 0 && ld.liveSubtasks+n > max {
			return &LimitError{JobID: j.id, Subtasks: true, Limit: max, JobSubtasks: n, LiveSubtasks: ld.liveSubtasks}
		}
	}
	j.live, j.subtasks = true, n
	ld.liveJobs++
	ld.liveSubtasks += n
	return nil
}

// releaseLocked stops counting j as live, if it was; d.mu must be held.
func (ld *leadership) releaseLocked(j *job) {
	if !j.live {
		return
	}
	j.live = false
	ld.liveJobs--
	ld.liveSubtasks -= j.subtasks
}

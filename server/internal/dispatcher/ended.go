package dispatcher

import (
	"time"

	"github.com/jobplane/jobplane/server/internal/jobmaster"
)

// Ended jobs' details. When a job ends, its JobMaster leaves its final
// details (jobmaster.Final: every vertex and subtask, and the plan), as
// Flink's ExecutionGraphInfoStore keeps an ended job's
// ArchivedExecutionGraph; GetJob serves them from then on (the job's
// status turns terminal once its result is recorded), for
// DetailsRetention and within DetailsSubtasks. Nothing of
// it is durable: a new leader, or an expired entry, answers with the
// summary and the exception history of the job's result alone.

// Defaults of the details kept for ended jobs (see Config).
const (
	// DefaultDetailsRetention is how long an ended job's final details
	// are kept: as long as its placements (DefaultOutputRetention).
	DefaultDetailsRetention = 10 * time.Minute
	// DefaultDetailsSubtasks bounds the subtasks of the ended jobs whose
	// final details are kept (a few tens of bytes each).
	DefaultDetailsSubtasks = 1_000_000
)

// endedDetails is an ended job whose final details are kept since at;
// n is their subtasks.
type endedDetails struct {
	j  *job
	n  int
	at time.Time
}

// keepDetailsLocked keeps an ended job's final details, for the details
// retention; d.mu must be held. ld.finalSubtasks counts the subtasks of
// the entries whose job still holds its details.
func (d *Dispatcher) keepDetailsLocked(ld *leadership, j *job, f *jobmaster.Final) {
	if f == nil || j.final != nil {
		return
	}
	j.final = f
	ld.finals = append(ld.finals, endedDetails{j: j, n: f.Subtasks(), at: time.Now()})
	ld.finalSubtasks += f.Subtasks()
	d.expireDetailsLocked(ld)
}

// expireDetailsLocked forgets the final details of ended jobs past the
// retention, and the oldest beyond the bound; d.mu must be held. Nothing
// wakes up for it: it runs as details are kept and read.
func (d *Dispatcher) expireDetailsLocked(ld *leadership) {
	now := time.Now()
	for len(ld.finals) > 0 {
		e := ld.finals[0]
		if e.j.final != nil && ld.finalSubtasks <= d.cfg.DetailsSubtasks && now.Sub(e.at) < d.cfg.DetailsRetention {
			return
		}
		dropFinalLocked(ld, e.j)
		ld.finals[0] = endedDetails{}
		ld.finals = ld.finals[1:]
	}
}

// dropFinalLocked forgets j's final details, if it holds any; d.mu must
// be held.
func dropFinalLocked(ld *leadership, j *job) {
	if j.final != nil {
		ld.finalSubtasks -= j.final.Subtasks()
		j.final = nil
	}
}

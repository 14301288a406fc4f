package dispatcher

import (
	"slices"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
)

// maxHistory bounds the changes a job keeps for watches to resume from.
const maxHistory = 64

// history holds a job's recent changes for WatchJob: its summary after
// each status change and after each restart that left its status as it
// was (a region restart while RUNNING). Changes are numbered from the
// job's first status on; each number is a resume point.
//
// It is bounded, as a job may fail and restart for ever. Only the last
// maxHistory changes are kept, and a restart replaces the restart
// recorded just before it, if no status change came between them: the
// newer one, which counts both, takes the next number. So a crash loop
// that never changes the job's status adds one change for all its
// restarts, not one per restart, and a slow watcher that resumes after a
// replaced restart gets the newer one (the contract lets restarts that
// follow each other faster than the stream is read be reported by one
// message).
type history struct {
	changes []change // oldest first, in increasing seq; never empty
}

// change is one entry of a history.
type change struct {
	seq     int
	summary *jobplanev1.JobSummary
	// restart marks a restart that left the status as it was: the next
	// such restart replaces it.
	restart bool
}

// newHistory starts a history with the job's first summary.
func newHistory(first *jobplanev1.JobSummary) history {
	return history{changes: []change{{summary: first}}}
}

// latest returns the current summary.
func (h *history) latest() *jobplanev1.JobSummary { return h.changes[len(h.changes)-1].summary }

// end is the number the next change will get.
func (h *history) end() int { return h.changes[len(h.changes)-1].seq + 1 }

// first is the number of the oldest change kept.
func (h *history) first() int { return h.changes[0].seq }

// at returns the summary a watch had seen once it was sent change number
// i: that change's, or, if it was a restart replaced since, the newest
// change kept before it (which has its status). ok is false when i is
// not kept (too old, or not yet numbered).
func (h *history) at(i int) (s *jobplanev1.JobSummary, ok bool) {
	if i < h.first() || i >= h.end() {
		return nil, false
	}
	for k := len(h.changes) - 1; k >= 0; k-- {
		if h.changes[k].seq <= i {
			return h.changes[k].summary, true
		}
	}
	return nil, false
}

// since returns the changes kept numbered from i on, oldest first.
func (h *history) since(i int) []change {
	for k, c := range h.changes {
		if c.seq >= i {
			return h.changes[k:]
		}
	}
	return nil
}

// record adds the job's summary s and reports whether that is a change
// watchers are told of: a new status, or a restart count grown under the
// same status. Anything else (new task counts, or the lower count of a
// new JobMaster) only refreshes the current summary.
func (h *history) record(s *jobplanev1.JobSummary) bool {
	last := &h.changes[len(h.changes)-1]
	restart := false
	if last.summary.GetStatus() == s.GetStatus() {
		if s.GetRestartCount() <= last.summary.GetRestartCount() {
			last.summary = s
			return false
		}
		restart = true
	}
	seq := last.seq + 1
	if restart && last.restart {
		// The newer restart counts both: it replaces the older one, under
		// a new number so that a watch that was sent the older one is sent
		// it too.
		h.changes = h.changes[:len(h.changes)-1]
	}
	h.changes = append(h.changes, change{seq: seq, summary: s, restart: restart})
	if len(h.changes) > maxHistory {
		// A watch resumed from a dropped change starts over, coalesced.
		h.changes = slices.Delete(h.changes, 0, 1)
	}
	return true
}

package dispatcher

import (
	"time"

	"github.com/google/btree"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
)

// Cursor is a position in the order in which ListJobs lists jobs: newest
// submission first, then by job id. A page listed after a cursor starts
// with the first job strictly after it, whether or not the job at the
// cursor still exists.
type Cursor struct {
	// SubmitTime is the submission time of the last job listed.
	SubmitTime time.Time
	// JobID is the id of the last job listed.
	JobID string
}

// jobIndex keeps the accepted jobs of a leadership ordered for listing, in
// total and per status, so that counting jobs by status costs O(1) and a
// page costs O(page + log n) per status asked for, whatever the number of
// jobs. A job enters it once accepted (its plan persisted, or its result
// recovered), moves between statuses as it changes status, and leaves it
// when it is forgotten (its result deleted, or its submission undone).
//
// The index owns the job fields indexed and indexedStatus; it is guarded
// by the Dispatcher's mutex like the rest of the leadership.
type jobIndex struct {
	all      *btree.BTreeG[indexEntry]
	byStatus map[jobplanev1.JobStatus]*btree.BTreeG[indexEntry]
}

// indexEntry is a job's place in the listing order: its key, and the job.
type indexEntry struct {
	submitNanos int64
	id          string
	job         *job
}

// indexDegree is the B-tree degree: nodes of up to 63 entries, about a
// cache-friendly 2.5 KiB, the degree etcd and Kubernetes use for indexes of
// this size.
const indexDegree = 32

// newer orders entries newest submission first, then by job id: the order
// of ListJobs. Job ids are unique, so no two indexed entries compare equal.
func newer(a, b indexEntry) bool {
	if a.submitNanos != b.submitNanos {
		return a.submitNanos > b.submitNanos
	}
	return a.id < b.id
}

func newJobIndex() *jobIndex {
	return &jobIndex{
		all:      btree.NewG(indexDegree, newer),
		byStatus: make(map[jobplanev1.JobStatus]*btree.BTreeG[indexEntry]),
	}
}

func entryOf(j *job) indexEntry {
	return indexEntry{submitNanos: j.submitNanos, id: j.id, job: j}
}

// add indexes j under its current status; a job already indexed is left
// as it is.
func (ix *jobIndex) add(j *job) {
	if j.indexed {
		return
	}
	j.indexed, j.indexedStatus = true, j.status()
	e := entryOf(j)
	ix.all.ReplaceOrInsert(e)
	ix.status(j.indexedStatus).ReplaceOrInsert(e)
}

// setStatus moves an indexed job to status; a job not indexed (not yet
// accepted) is left alone, and is indexed under its status of then.
func (ix *jobIndex) setStatus(j *job, status jobplanev1.JobStatus) {
	if !j.indexed || j.indexedStatus == status {
		return
	}
	e := entryOf(j)
	ix.status(j.indexedStatus).Delete(e)
	j.indexedStatus = status
	ix.status(status).ReplaceOrInsert(e)
}

// remove forgets j; a job not indexed is left alone.
func (ix *jobIndex) remove(j *job) {
	if !j.indexed {
		return
	}
	e := entryOf(j)
	ix.all.Delete(e)
	ix.status(j.indexedStatus).Delete(e)
	j.indexed = false
}

// status returns the tree of status, creating it the first time. There
// are a dozen statuses at most, so empty trees are kept.
func (ix *jobIndex) status(s jobplanev1.JobStatus) *btree.BTreeG[indexEntry] {
	t := ix.byStatus[s]
	if t == nil {
		t = btree.NewG(indexDegree, newer)
		ix.byStatus[s] = t
	}
	return t
}

// len returns the number of indexed jobs.
func (ix *jobIndex) len() int { return ix.all.Len() }

// count returns the number of indexed jobs in status.
func (ix *jobIndex) count(s jobplanev1.JobStatus) int {
	if t := ix.byStatus[s]; t != nil {
		return t.Len()
	}
	return 0
}

// page returns up to size jobs in listing order, strictly after the
// cursor after (from the newest if nil), in any of statuses (all if
// empty), and whether more follow.
//
// With k distinct statuses it reads at most size+1 entries from each of
// their trees and merges them: O(k · (size + log n)), k being at most the
// number of statuses.
func (ix *jobIndex) page(statuses []jobplanev1.JobStatus, after *Cursor, size int) (jobs []*job, more bool) {
	var runs [][]indexEntry
	if len(statuses) == 0 {
		runs = append(runs, ascendAfter(ix.all, after, size+1))
	} else {
		seen := make(map[jobplanev1.JobStatus]bool, len(statuses))
		for _, s := range statuses {
			if t := ix.byStatus[s]; t != nil && t.Len() > 0 && !seen[s] {
				runs = append(runs, ascendAfter(t, after, size+1))
			}
			seen[s] = true
		}
	}
	// Merge the runs, each in order, taking the newest head each time.
	jobs = make([]*job, 0, size)
	for {
		best := -1
		for i, r := range runs {
			if len(r) > 0 && (best < 0 || newer(r[0], runs[best][0])) {
				best = i
			}
		}
		if best < 0 {
			return jobs, false
		}
		if len(jobs) == size {
			return jobs, true
		}
		jobs = append(jobs, runs[best][0].job)
		runs[best] = runs[best][1:]
	}
}

// ascendAfter returns up to n entries of t strictly after the cursor
// (from the first if nil), in order.
func ascendAfter(t *btree.BTreeG[indexEntry], after *Cursor, n int) []indexEntry {
	out := make([]indexEntry, 0, min(n, t.Len()))
	take := func(e indexEntry) bool {
		out = append(out, e)
		return len(out) < n
	}
	if after == nil {
		t.Ascend(take)
		return out
	}
	pivot := indexEntry{submitNanos: after.SubmitTime.UnixNano(), id: after.JobID}
	t.AscendGreaterOrEqual(pivot, func(e indexEntry) bool {
		if e.submitNanos == pivot.submitNanos && e.id == pivot.id {
			return true // the cursor's own job: listed already
		}
		return take(e)
	})
	return out
}

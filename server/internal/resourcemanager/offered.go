package resourcemanager

import (
	"maps"
	"slices"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
)

// NotOffered checks the invokables of a job's vertices against the
// TaskExecutors registered now: it returns the indexes of the vertices
// whose invokable no registered TaskExecutor offers, in increasing order,
// and every invokable the registered TaskExecutors offer, sorted. Both
// are nil when every invokable is offered, when no TaskExecutor is
// registered (a cluster that is starting: the job waits for one), and
// while the ResourceManager does not lead.
//
// They are nil too while this leadership may not know every TaskExecutor
// yet, so that a new leader does not refuse a job because the
// TaskExecutors offering its invokables have not registered again: with
// the store's membership, while it is not read, or while a member is not
// registered here (a member that left stays one until it is removed);
// without it, for the grace a TaskExecutor has to find a new leader
// (twice the heartbeat interval and a second) from the leadership's start.
// Only a refusal pays for these checks.
//
// It answers from a count kept as TaskExecutors register and leave: a
// lookup per vertex, and no allocation unless some invokable is missing.
// The answer may be out of date as soon as it is given (a TaskExecutor
// joins or leaves); deployment checks invokables again.
func (rm *ResourceManager) NotOffered(vertices []*jobplanev1.JobVertex) (missing []int, offered []string) {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	if rm.pool == nil || len(rm.pool.executors) == 0 {
		return nil, nil
	}
	for i, v := range vertices {
		if rm.pool.offered[v.GetInvokable()] == 0 {
			missing = append(missing, i)
		}
	}
	if missing == nil || !rm.knowsAllLocked() {
		return nil, nil
	}
	return missing, slices.Sorted(maps.Keys(rm.pool.offered))
}

// knowsAllLocked reports whether every TaskExecutor that may be part of
// the cluster has registered with this leadership (see NotOffered).
func (rm *ResourceManager) knowsAllLocked() bool {
	if m := rm.members; m != nil {
		if !m.loaded {
			return false
		}
		for id := range m.seen {
			if rm.pool.executors[id] == nil {
				return false
			}
		}
		return true
	}
	return time.Since(rm.leadSince) >= rm.grace()
}

package resourcemanager

import (
	"maps"
	"slices"

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
	if missing == nil {
		return nil, nil
	}
	return missing, slices.Sorted(maps.Keys(rm.pool.offered))
}

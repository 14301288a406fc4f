package dispatcher

import (
	"fmt"
	"slices"
	"strings"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
)

// The check of a new job's invokables. A job whose vertices name an
// invokable that no registered TaskExecutor offers is refused before
// anything is written for it, while at least one TaskExecutor is
// registered. It is a best-effort, up-front answer from the
// ResourceManager's registrations as they are when the job is submitted:
// a TaskExecutor may join or leave right after, and the deployment's
// UNKNOWN_INVOKABLE stays the backstop. A job submitted while none is
// registered (a cluster that is starting) waits for slots as before;
// resubmissions and recovered jobs are never checked.

// NotOfferedError says that a new job names invokables that no registered
// TaskExecutor offers; nothing was done for it.
type NotOfferedError struct {
	// JobID is the refused job's id.
	JobID string
	// Vertices are the indexes (in JobGraph.vertices) of the vertices
	// whose invokable is not offered, in increasing order, and Invokables
	// their invokables, one per vertex.
	Vertices   []int
	Invokables []string
	// Offered is every invokable the registered TaskExecutors offer,
	// sorted.
	Offered []string
}

// Missing returns the invokables not offered, sorted and without repeats.
func (e *NotOfferedError) Missing() []string {
	return slices.Compact(slices.Sorted(slices.Values(e.Invokables)))
}

func (e *NotOfferedError) Error() string {
	return fmt.Sprintf("dispatcher: job %s names invokables that no registered TaskExecutor offers (%s); they offer %s",
		e.JobID, strings.Join(e.Missing(), ", "), strings.Join(e.Offered, ", "))
}

// checkInvokables returns a *NotOfferedError if some vertex of graph names
// an invokable that no registered TaskExecutor offers, and nil otherwise
// (also when no TaskExecutor is registered). It allocates nothing when
// every invokable is offered: submission is a hot path.
func (d *Dispatcher) checkInvokables(jobID string, graph *jobplanev1.JobGraph) error {
	if d.cfg.TaskExecutors == nil {
		return nil
	}
	vertices := graph.GetVertices()
	missing, offered := d.cfg.TaskExecutors.NotOffered(vertices)
	if len(missing) == 0 {
		return nil
	}
	e := &NotOfferedError{JobID: jobID, Vertices: missing, Offered: offered}
	for _, i := range missing {
		e.Invokables = append(e.Invokables, vertices[i].GetInvokable())
	}
	return e
}

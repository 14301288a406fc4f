package jobmaster

import (
	"context"
	"errors"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
)

// Placement is where an execution attempt was deployed.
type Placement struct {
	// Attempt is the attempt's number.
	Attempt int
	// TaskExecutorID is the TaskExecutor it was deployed to.
	TaskExecutorID string
}

// Errors of Locate and Placements.Find.
var (
	// ErrUnknownVertex: the job has no vertex of that id.
	ErrUnknownVertex = errors.New("jobmaster: unknown vertex")
	// ErrSubtaskOutOfRange: the vertex has no subtask of that index.
	ErrSubtaskOutOfRange = errors.New("jobmaster: subtask index out of range")
	// ErrNotPlaced: the attempt was not deployed (yet), or where it was
	// is no longer known.
	ErrNotPlaced = errors.New("jobmaster: the attempt was not deployed, or where it was is not known")
)

// Placements are where the attempts of a job's subtasks were deployed, as
// its JobMaster left them when it ended: per subtask, its latest deployed
// attempt; and the failed attempts of the exception history.
type Placements struct {
	vertices map[string][]Placement // by vertex id, by subtask index
	failed   []*jobplanev1.FailureInfo
	n        int
}

// Subtasks returns the number of subtasks the placements cover.
func (p *Placements) Subtasks() int {
	if p == nil {
		return 0
	}
	return p.n
}

// Find returns where an attempt of a subtask was deployed: attempt
// number attempt, or the latest deployed one when attempt is negative. A
// failed attempt is found where the exception history says it failed;
// another earlier one, where the latest was deployed. It fails with ErrUnknownVertex, ErrSubtaskOutOfRange or ErrNotPlaced.
func (p *Placements) Find(vertexID string, subtask, attempt int) (Placement, error) {
	ps, ok := p.vertices[vertexID]
	if !ok {
		return Placement{}, ErrUnknownVertex
	}
	return findPlacement(len(ps), func(i int) Placement { return ps[i] }, p.failed, vertexID, subtask, attempt)
}

// findPlacement finds an attempt among a vertex's parallelism subtasks,
// whose latest deployed attempts at returns (a zero TaskExecutorID before
// the first), and among the failed attempts.
func findPlacement(parallelism int, at func(int) Placement, failed []*jobplanev1.FailureInfo, vertexID string, subtask, attempt int) (Placement, error) {
	if subtask < 0 || subtask >= parallelism {
		return Placement{}, ErrSubtaskOutOfRange
	}
	latest := at(subtask)
	if latest.TaskExecutorID != "" && (attempt < 0 || attempt == latest.Attempt) {
		return latest, nil
	}
	for _, f := range failed {
		a := f.GetAttempt()
		if attempt >= 0 && f.GetTaskExecutorId() != "" && a.GetVertexId() == vertexID &&
			int(a.GetSubtaskIndex()) == subtask && int(a.GetAttemptNumber()) == attempt {
			return Placement{Attempt: attempt, TaskExecutorID: f.GetTaskExecutorId()}, nil
		}
	}
	if latest.TaskExecutorID != "" && attempt >= 0 && attempt < latest.Attempt {
		// An earlier attempt that did not fail (canceled with its region,
		// say): only where the latest went is known, and a subtask often
		// stays where it was. The TaskExecutor tells if it is not there.
		return Placement{Attempt: attempt, TaskExecutorID: latest.TaskExecutorID}, nil
	}
	return Placement{}, ErrNotPlaced
}

// place records that execution vertex ev's current attempt is
// deployed to executor; called by the goroutine handling events.
func (jm *JobMaster) place(ev int32, executor string) {
	jm.placed[ev] = Placement{Attempt: int(jm.graph.Attempt(ev)), TaskExecutorID: executor}
}

// Locate returns where an attempt of a subtask of the job was deployed:
// attempt number attempt, or the latest deployed one when attempt is
// negative. It fails with ErrUnknownVertex, ErrSubtaskOutOfRange or
// ErrNotPlaced, or with NOT_LEADER once the JobMaster has stopped
// without the job's end (after the end, it answers from the placements
// it ended with).
func (jm *JobMaster) Locate(ctx context.Context, vertexID string, subtask, attempt int) (Placement, error) {
	var (
		p    Placement
		ferr error
	)
	err := jm.do(ctx, func() {
		vi, ok := jm.vertexByID[vertexID]
		if !ok {
			ferr = ErrUnknownVertex
			return
		}
		parallelism := int(jm.cfg.Graph.GetVertices()[vi].GetParallelism())
		p, ferr = findPlacement(parallelism, func(i int) Placement {
			return jm.placed[jm.graph.ExecutionVertex(vi, i)]
		}, jm.exceptions, vertexID, subtask, attempt)
	})
	if err != nil {
		// A JobMaster that stopped with the job's end still knows where
		// its attempts ran, until the Dispatcher keeps its placements.
		jm.mu.Lock()
		ended := jm.ended
		jm.mu.Unlock()
		if ended != nil && ctx.Err() == nil {
			return ended.Find(vertexID, subtask, attempt)
		}
		return Placement{}, err
	}
	return p, ferr
}

// placements returns the job's placements as they stand; called by the
// goroutine handling events.
func (jm *JobMaster) placements() *Placements {
	p := &Placements{vertices: make(map[string][]Placement, len(jm.cfg.Graph.GetVertices())), failed: jm.exceptions, n: len(jm.placed)}
	for vi, v := range jm.cfg.Graph.GetVertices() {
		ps := make([]Placement, v.GetParallelism())
		for i := range ps {
			ps[i] = jm.placed[jm.graph.ExecutionVertex(vi, i)]
		}
		p.vertices[v.GetId()] = ps
	}
	return p
}

package jobmaster

import (
	"context"
	"errors"
	"slices"

	"google.golang.org/protobuf/proto"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
)

// Placement is where an execution attempt was deployed.
type Placement struct {
	// Attempt is the attempt's number.
	Attempt int
	// TaskExecutorID is the TaskExecutor it was deployed to.
	TaskExecutorID string
	// Address is that TaskExecutor's address when the attempt was
	// deployed, if the JobMaster knew it.
	Address string
}

// maxPlacements bounds the attempts of one subtask whose placement is
// kept (JobResult.placements): the most recent ones.
const maxPlacements = 8

// maxPlacementBytes bounds the encoded placements kept with a job's
// result, so that the result of a job of many subtasks that restarted
// often still fits the HA store's limit on a write: beyond it, only each
// subtask's latest attempt is kept, and beyond that, the subtasks that
// come first in the graph.
const maxPlacementBytes = 256 << 10

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
	order    []string               // vertex ids, in graph order
	vertices map[string][]Placement // by vertex id, by subtask index
	// earlier holds, by vertex id and subtask index, where the subtask's
	// earlier attempts went, oldest first (at most maxPlacements-1); nil
	// for a vertex none of whose subtasks ran twice.
	earlier map[string][][]Placement
	failed  []*jobplanev1.FailureInfo
	n       int
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
	earlier := p.earlier[vertexID]
	return findPlacement(len(ps), func(i int) (Placement, []Placement) {
		if earlier == nil {
			return ps[i], nil
		}
		return ps[i], earlier[i]
	}, p.failed, vertexID, subtask, attempt)
}

// findPlacement finds an attempt among a vertex's parallelism subtasks,
// whose latest deployed attempts (a zero TaskExecutorID before the first)
// and earlier ones at returns, and among the failed attempts.
func findPlacement(parallelism int, at func(int) (Placement, []Placement), failed []*jobplanev1.FailureInfo, vertexID string, subtask, attempt int) (Placement, error) {
	if subtask < 0 || subtask >= parallelism {
		return Placement{}, ErrSubtaskOutOfRange
	}
	latest, earlier := at(subtask)
	if latest.TaskExecutorID != "" && (attempt < 0 || attempt == latest.Attempt) {
		return latest, nil
	}
	for _, p := range earlier {
		if p.Attempt == attempt {
			return p, nil
		}
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
	p := Placement{Attempt: int(jm.graph.Attempt(ev)), TaskExecutorID: executor}
	if e := jm.executors[executor]; e != nil {
		p.Address = e.address
	}
	if prev := jm.placed[ev]; prev.TaskExecutorID != "" && prev.Attempt != p.Attempt {
		// A subtask that restarts keeps where its earlier attempts went;
		// one that never does costs nothing more.
		if jm.earlier == nil {
			jm.earlier = make(map[int32][]Placement)
		}
		e := append(jm.earlier[ev], prev)
		if len(e) > maxPlacements-1 {
			e = append(e[:0], e[len(e)-(maxPlacements-1):]...)
		}
		jm.earlier[ev] = e
	}
	jm.placed[ev] = p
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
		p, ferr = findPlacement(parallelism, func(i int) (Placement, []Placement) {
			ev := jm.graph.ExecutionVertex(vi, i)
			return jm.placed[ev], jm.earlier[ev]
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
		var earlier [][]Placement
		for i := range ps {
			ev := jm.graph.ExecutionVertex(vi, i)
			ps[i] = jm.placed[ev]
			if e := jm.earlier[ev]; e != nil {
				if earlier == nil {
					earlier = make([][]Placement, len(ps))
				}
				earlier[i] = slices.Clone(e)
			}
		}
		p.order = append(p.order, v.GetId())
		p.vertices[v.GetId()] = ps
		if earlier != nil {
			if p.earlier == nil {
				p.earlier = make(map[string][][]Placement)
			}
			p.earlier[v.GetId()] = earlier
		}
	}
	return p
}

// Proto returns the placements as JobResult.placements: per subtask its
// most recent deployed attempts (at most 8), in graph vertex order, then
// subtask index, then attempt number. Placements past maxPlacementBytes
// encoded are left out: first every attempt but each subtask's latest,
// then the latest of the subtasks that come last. Nil for nil.
func (p *Placements) Proto() []*jobplanev1.AttemptPlacement {
	if p == nil {
		return nil
	}
	var all, latest []*jobplanev1.AttemptPlacement
	allBytes, latestBytes := 0, 0
	add := func(vertexID string, subtask int, pl Placement, isLatest bool) {
		ap := &jobplanev1.AttemptPlacement{
			Attempt:        &jobplanev1.ExecutionAttemptId{VertexId: vertexID, SubtaskIndex: int32(subtask), AttemptNumber: int32(pl.Attempt)},
			TaskExecutorId: pl.TaskExecutorID, TaskExecutorAddress: pl.Address,
		}
		n := proto.Size(ap) + 4 // the field's tag and length
		all, allBytes = append(all, ap), allBytes+n
		if isLatest && latestBytes+n <= maxPlacementBytes {
			latest, latestBytes = append(latest, ap), latestBytes+n
		}
	}
	for _, id := range p.order {
		earlier := p.earlier[id]
		for i, pl := range p.vertices[id] {
			if earlier != nil {
				for _, e := range earlier[i] {
					add(id, i, e, false)
				}
			}
			if pl.TaskExecutorID != "" {
				add(id, i, pl, true)
			}
		}
	}
	if allBytes <= maxPlacementBytes {
		return all
	}
	return latest
}

// PlacementsOf returns the placements a job's result kept
// (JobResult.placements), for a job whose graph is no longer known: Find
// answers ErrNotPlaced for a vertex or subtask they do not name.
func PlacementsOf(result []*jobplanev1.AttemptPlacement) *StoredPlacements {
	return &StoredPlacements{ps: result}
}

// StoredPlacements are the placements kept with a job's result.
type StoredPlacements struct {
	ps []*jobplanev1.AttemptPlacement
}

// Find returns where an attempt of a subtask was deployed, as
// Placements.Find does, but knows no graph: a vertex or subtask that no
// placement names, like an attempt none names, fails with ErrNotPlaced.
func (s *StoredPlacements) Find(vertexID string, subtask, attempt int) (Placement, error) {
	found, ok := Placement{}, false
	for _, ap := range s.ps {
		a := ap.GetAttempt()
		if a.GetVertexId() != vertexID || int(a.GetSubtaskIndex()) != subtask {
			continue
		}
		n := int(a.GetAttemptNumber())
		if attempt >= 0 && n != attempt || ok && n < found.Attempt {
			continue
		}
		found, ok = Placement{Attempt: n, TaskExecutorID: ap.GetTaskExecutorId(), Address: ap.GetTaskExecutorAddress()}, true
	}
	if !ok {
		return Placement{}, ErrNotPlaced
	}
	return found, nil
}

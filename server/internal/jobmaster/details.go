package jobmaster

import (
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/sdk/wire/jobstatus"
)

func (jm *JobMaster) summaryLocked() *jobplanev1.JobSummary {
	s := &jobplanev1.JobSummary{
		JobId: jm.cfg.JobID, Name: jm.cfg.Graph.GetName(), Status: jm.status,
		StatusTime: timestamppb.New(jm.statusTime), RestartCount: int32(jm.restart.used),
	}
	if !jobstatus.IsGloballyTerminal(jm.status) || jm.status == jobstatus.Failed {
		s.Failure = jm.failure
	}
	if !jm.cfg.SubmitTime.IsZero() {
		s.SubmitTime = timestamppb.New(jm.cfg.SubmitTime)
	}
	if jobstatus.IsGloballyTerminal(jm.status) {
		s.EndTime = timestamppb.New(jm.statusTime)
	}
	// From the graph's counters: the summary goes out at every status
	// change and restart, and a job may have many subtasks.
	counts := map[jobplanev1.ExecutionState]int32{}
	for state := jobplanev1.ExecutionState(1); int(state) < len(jobplanev1.ExecutionState_name); state++ {
		if n := jm.graph.Count(state); n > 0 {
			counts[state] = int32(n)
		}
	}
	s.TaskCounts = stateCounts(counts)
	return s
}

func stateCounts(counts map[jobplanev1.ExecutionState]int32) []*jobplanev1.ExecutionStateCount {
	var out []*jobplanev1.ExecutionStateCount
	for state := jobplanev1.ExecutionState(1); int(state) < len(jobplanev1.ExecutionState_name); state++ {
		if n := counts[state]; n > 0 {
			out = append(out, &jobplanev1.ExecutionStateCount{State: state, Count: n})
		}
	}
	return out
}

// Page selects the subtasks a full view lists: those at positions
// [Offset, Offset+Size) when all subtasks are ordered by vertex, then by
// subtask index.
type Page struct {
	Offset, Size int
}

// detailsLocked returns the job's details; with full, the page's
// subtasks, and the offset of the next page (-1 after the last).
func (jm *JobMaster) detailsLocked(full bool, page Page) (*jobplanev1.JobDetails, int) {
	d := &jobplanev1.JobDetails{Summary: jm.summaryLocked(), ExceptionHistory: jm.exceptions, Checkpoints: jm.checkpointStats()}
	if full && page.Offset == 0 {
		d.JobGraph = jm.cfg.Graph // read only, as every user of the plan
	}
	var next int
	d.Vertices, next = pageVertices(jm.cfg.Graph, full, page, func(vi, first, last int) *jobplanev1.VertexDetails {
		v := jm.cfg.Graph.GetVertices()[vi]
		p := int(v.GetParallelism())
		vd := &jobplanev1.VertexDetails{VertexId: v.GetId(), Name: v.GetName(), Parallelism: v.GetParallelism()}
		counts := map[jobplanev1.ExecutionState]int32{}
		for i := range p {
			ev := jm.graph.ExecutionVertex(vi, i)
			counts[jm.graph.State(ev)]++
			if first <= i && i < last {
				vd.Subtasks = append(vd.Subtasks, jm.subtaskLocked(ev).details(i))
			}
		}
		vd.TaskCounts = stateCounts(counts)
		vd.State = vertexState(counts, p)
		vd.StartTime, vd.EndTime = jm.vertices[vi].times(counts, p)
		return vd
	})
	return d, next
}

// pageVertices lists the vertices of a job's details: every vertex, or
// with full those with subtasks in the page, each as vertex makes it
// with the subtasks of indexes [first, last) (none without full); and the
// offset of the next page (-1 after the last). A running JobMaster and
// the details it leaves when the job ends (Final) page alike.
func pageVertices(graph *jobplanev1.JobGraph, full bool, page Page, vertex func(vi, first, last int) *jobplanev1.VertexDetails) ([]*jobplanev1.VertexDetails, int) {
	var out []*jobplanev1.VertexDetails
	end := page.Offset + page.Size
	pos := 0
	for vi, v := range graph.GetVertices() {
		p := int(v.GetParallelism())
		first, last := max(page.Offset-pos, 0), min(end-pos, p) // the vertex's subtasks in the page
		pos += p
		if !full {
			first, last = 0, 0
		} else if first >= last {
			continue
		}
		out = append(out, vertex(vi, first, last))
	}
	if full && pos > end {
		return out, end
	}
	return out, -1
}

// subtaskState is what the details show of a subtask's current attempt.
type subtaskState struct {
	attempt  int32
	state    jobplanev1.ExecutionState
	executor string
	failure  *jobplanev1.FailureInfo
	since    time.Time // when the attempt entered state; zero if never moved
}

// details returns the state as subtask index i's SubtaskDetails.
func (s subtaskState) details(i int) *jobplanev1.SubtaskDetails {
	d := &jobplanev1.SubtaskDetails{
		SubtaskIndex: int32(i), AttemptNumber: s.attempt, State: s.state, TaskExecutorId: s.executor, Failure: s.failure,
	}
	if !s.since.IsZero() {
		d.StateTime = timestamppb.New(s.since)
	}
	return d
}

// subtaskLocked returns the state of execution vertex ev's current
// attempt. Its TaskExecutor is the one it holds a slot of, or, once it
// ended (its slot given back), the one it was deployed to.
func (jm *JobMaster) subtaskLocked(ev int32) subtaskState {
	t := &jm.tasks[ev]
	s := subtaskState{attempt: int32(jm.graph.Attempt(ev)), state: jm.graph.State(ev), executor: t.slot.executorID(), failure: t.failure, since: t.since}
	if p := jm.placed[ev]; s.executor == "" && p.TaskExecutorID != "" && p.Attempt == int(s.attempt) {
		s.executor = p.TaskExecutorID
	}
	return s
}

func protoToken(t election.Token) *jobplanev1.FencingToken {
	return &jobplanev1.FencingToken{SessionId: t.SessionID, Epoch: t.Epoch}
}

// vertexTimes are when a vertex's subtasks first ran and when one last
// finished.
type vertexTimes struct {
	start, lastFinish time.Time
}

// times returns the vertex's start and end times as VertexDetails shows
// them, given its p subtasks' counts per state.
func (v vertexTimes) times(counts map[jobplanev1.ExecutionState]int32, p int) (start, end *timestamppb.Timestamp) {
	if !v.start.IsZero() {
		start = timestamppb.New(v.start)
	}
	if int(counts[jobplanev1.ExecutionState_EXECUTION_STATE_FINISHED]) == p && !v.lastFinish.IsZero() {
		end = timestamppb.New(v.lastFinish)
	}
	return start, end
}

// moved accounts for one subtask of the vertex moving to state to at now.
// (A restart takes subtasks back to CREATED without passing here; the
// vertex's end is read from its counts, see detailsLocked.)
func (v *vertexTimes) moved(to jobplanev1.ExecutionState, now time.Time) {
	switch {
	case to == jobplanev1.ExecutionState_EXECUTION_STATE_RUNNING && v.start.IsZero():
		v.start = now
	case to == jobplanev1.ExecutionState_EXECUTION_STATE_FINISHED:
		v.lastFinish = now
	}
}

// vertexState aggregates the states of a vertex's n subtasks, as
// VertexDetails.state says.
func vertexState(counts map[jobplanev1.ExecutionState]int32, n int) jobplanev1.ExecutionState {
	for state, c := range counts {
		if int(c) == n {
			return state
		}
	}
	for _, state := range []jobplanev1.ExecutionState{
		jobplanev1.ExecutionState_EXECUTION_STATE_FAILED, jobplanev1.ExecutionState_EXECUTION_STATE_CANCELING,
		jobplanev1.ExecutionState_EXECUTION_STATE_CANCELED, jobplanev1.ExecutionState_EXECUTION_STATE_RUNNING,
		jobplanev1.ExecutionState_EXECUTION_STATE_INITIALIZING, jobplanev1.ExecutionState_EXECUTION_STATE_DEPLOYING,
		jobplanev1.ExecutionState_EXECUTION_STATE_SCHEDULED,
	} {
		if counts[state] > 0 {
			return state
		}
	}
	return jobplanev1.ExecutionState_EXECUTION_STATE_CREATED
}

package jobmaster

import (
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
)

// Final is a job's details as its JobMaster left them when the job ended
// (Flink's ArchivedExecutionGraph): every vertex with its counts, state
// and times, every subtask's last attempt with its state, TaskExecutor
// and failure, and the job's plan. It is taken after the last attempt
// reached its final state, never changes, and may be read by any
// goroutine. A subtask costs it a few tens of bytes.
type Final struct {
	graph      *jobplanev1.JobGraph
	exceptions []*jobplanev1.FailureInfo
	counts     []*jobplanev1.ExecutionStateCount // job-wide
	vertices   []finalVertex                     // by vertex index
	n          int
	ckpt       *jobplanev1.CheckpointStats // nil without checkpoints
}

// finalVertex is one vertex of a Final.
type finalVertex struct {
	counts     []*jobplanev1.ExecutionStateCount
	state      jobplanev1.ExecutionState
	start, end *timestamppb.Timestamp
	subtasks   []subtaskState // by subtask index
}

// final returns the job's details as they stand, for Result; called by
// the goroutine handling events once the job is globally terminal.
func (jm *JobMaster) final() *Final {
	f := &Final{graph: jm.cfg.Graph, exceptions: jm.exceptions, vertices: make([]finalVertex, len(jm.cfg.Graph.GetVertices())), n: jm.graph.Subtasks(), ckpt: jm.checkpointStats()}
	all := map[jobplanev1.ExecutionState]int32{}
	for vi, v := range jm.cfg.Graph.GetVertices() {
		p := int(v.GetParallelism())
		fv := &f.vertices[vi]
		fv.subtasks = make([]subtaskState, p)
		counts := map[jobplanev1.ExecutionState]int32{}
		for i := range p {
			s := jm.subtaskLocked(jm.graph.ExecutionVertex(vi, i))
			fv.subtasks[i] = s
			counts[s.state]++
			all[s.state]++
		}
		fv.counts = stateCounts(counts)
		fv.state = vertexState(counts, p)
		fv.start, fv.end = jm.vertices[vi].times(counts, p)
	}
	f.counts = stateCounts(all)
	return f
}

// Subtasks returns the number of subtasks f holds; 0 for nil.
func (f *Final) Subtasks() int {
	if f == nil {
		return 0
	}
	return f.n
}

// Exceptions returns the job's exception history as its JobMaster left
// it, most recent first (as Result.Exceptions).
func (f *Final) Exceptions() []*jobplanev1.FailureInfo { return f.exceptions }

// Details returns the job's details with summary (a copy of it gets the
// job-wide counts) and exceptions as its summary and exception history,
// paged as a running JobMaster pages them: with full, the subtasks of
// page and the plan on the first page; and the offset of the next page
// (-1 after the last).
func (f *Final) Details(summary *jobplanev1.JobSummary, exceptions []*jobplanev1.FailureInfo, full bool, page Page) (*jobplanev1.JobDetails, int) {
	s := proto.CloneOf(summary)
	s.TaskCounts = f.counts
	d := &jobplanev1.JobDetails{Summary: s, ExceptionHistory: exceptions, Checkpoints: f.ckpt}
	if full && page.Offset == 0 {
		d.JobGraph = f.graph
	}
	var next int
	d.Vertices, next = pageVertices(f.graph, full, page, func(vi, first, last int) *jobplanev1.VertexDetails {
		v, fv := f.graph.GetVertices()[vi], &f.vertices[vi]
		vd := &jobplanev1.VertexDetails{
			VertexId: v.GetId(), Name: v.GetName(), Parallelism: v.GetParallelism(),
			TaskCounts: fv.counts, State: fv.state, StartTime: fv.start, EndTime: fv.end,
		}
		for i := first; i < last; i++ {
			vd.Subtasks = append(vd.Subtasks, fv.subtasks[i].details(i))
		}
		return vd
	})
	return d, next
}

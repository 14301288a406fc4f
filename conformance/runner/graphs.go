package runner

import (
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
)

// noopGraph is one vertex of n noop subtasks.
func noopGraph(n int32) *jobplanev1.JobGraph {
	return &jobplanev1.JobGraph{Name: "noop", Vertices: []*jobplanev1.JobVertex{{Id: "v", Invokable: "noop", Parallelism: n}}}
}

// gatedGraph is a source of n noop subtasks feeding, all-to-all and
// pipelined, n "gate" subtasks that run until the case opens gate.
func gatedGraph(n int32, gate string) *jobplanev1.JobGraph {
	return &jobplanev1.JobGraph{
		Name: "gated",
		Vertices: []*jobplanev1.JobVertex{
			{Id: "src", Invokable: "noop", Parallelism: n},
			{Id: "sink", Invokable: "gate", Parallelism: n, Config: map[string]string{"gate": gate}},
		},
		Edges: []*jobplanev1.JobEdge{{
			SourceVertexId: "src", TargetVertexId: "sink",
			Distribution: jobplanev1.DistributionPattern_DISTRIBUTION_PATTERN_ALL_TO_ALL,
			ResultType:   jobplanev1.ResultPartitionType_RESULT_PARTITION_TYPE_PIPELINED,
		}},
	}
}

// failGraph is one subtask that fails, without restarts.
func failGraph() *jobplanev1.JobGraph {
	return &jobplanev1.JobGraph{Name: "fail", Vertices: []*jobplanev1.JobVertex{{Id: "v", Invokable: "fail", Parallelism: 1,
		Config: map[string]string{"message": "failed on purpose"}}}}
}

// blockingGraph is a source of n noop subtasks feeding, all-to-all over a
// blocking result, n noop subtasks: the second vertex is deployed only
// once the first finished.
func blockingGraph(n int32) *jobplanev1.JobGraph {
	return &jobplanev1.JobGraph{
		Name: "blocking",
		Vertices: []*jobplanev1.JobVertex{
			{Id: "src", Invokable: "noop", Parallelism: n},
			{Id: "sink", Invokable: "noop", Parallelism: n},
		},
		Edges: []*jobplanev1.JobEdge{{
			SourceVertexId: "src", TargetVertexId: "sink",
			Distribution: jobplanev1.DistributionPattern_DISTRIBUTION_PATTERN_ALL_TO_ALL,
			ResultType:   jobplanev1.ResultPartitionType_RESULT_PARTITION_TYPE_BLOCKING,
		}},
	}
}

// chainGraph is three vertices of n noop subtasks each, connected
// pointwise and pipelined.
func chainGraph(n int32) *jobplanev1.JobGraph {
	g := &jobplanev1.JobGraph{Name: "chain"}
	for _, id := range []string{"a", "b", "c"} {
		g.Vertices = append(g.Vertices, &jobplanev1.JobVertex{Id: id, Invokable: "noop", Parallelism: n})
	}
	for _, e := range [][2]string{{"a", "b"}, {"b", "c"}} {
		g.Edges = append(g.Edges, &jobplanev1.JobEdge{SourceVertexId: e[0], TargetVertexId: e[1],
			Distribution: jobplanev1.DistributionPattern_DISTRIBUTION_PATTERN_POINTWISE,
			ResultType:   jobplanev1.ResultPartitionType_RESULT_PARTITION_TYPE_PIPELINED})
	}
	return g
}

// shapes are the graphs cases run where the shape must not matter: one
// vertex, a pipelined chain of several, and a blocking edge; each with the
// number of its subtasks.
var shapes = []struct {
	name     string
	graph    *jobplanev1.JobGraph
	subtasks int
}{
	{"one-vertex", noopGraph(2), 2},
	{"chain", chainGraph(2), 6},
	{"blocking", blockingGraph(2), 4},
}

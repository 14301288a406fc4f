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

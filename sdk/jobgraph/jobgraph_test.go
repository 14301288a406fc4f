package jobgraph_test

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/jobgraph"
)

func vertex(id string, p int32) *jobplanev1.JobVertex {
	return &jobplanev1.JobVertex{Id: id, Invokable: "noop", Parallelism: p}
}

func edge(from, to string) *jobplanev1.JobEdge {
	return &jobplanev1.JobEdge{
		SourceVertexId: from, TargetVertexId: to,
		Distribution: jobplanev1.DistributionPattern_DISTRIBUTION_PATTERN_ALL_TO_ALL,
		ResultType:   jobplanev1.ResultPartitionType_RESULT_PARTITION_TYPE_PIPELINED,
	}
}

func graph(vs []*jobplanev1.JobVertex, es ...*jobplanev1.JobEdge) *jobplanev1.JobGraph {
	return &jobplanev1.JobGraph{Name: "g", Vertices: vs, Edges: es}
}

func TestPrepareRejects(t *testing.T) {
	t.Parallel()
	many := make([]*jobplanev1.JobVertex, 4)
	for i := range many {
		many[i] = vertex(string(rune('a'+i)), 1)
	}
	for _, tc := range []struct {
		name   string
		g      *jobplanev1.JobGraph
		limits jobgraph.Limits
		field  string
	}{
		{"nil graph", nil, jobgraph.Limits{}, "job_graph"},
		{"no vertices", graph(nil), jobgraph.Limits{}, "job_graph.vertices"},
		{"empty vertex id", graph([]*jobplanev1.JobVertex{vertex("", 1)}), jobgraph.Limits{}, "job_graph.vertices[0].id"},
		{"bad vertex id", graph([]*jobplanev1.JobVertex{vertex("a b", 1)}), jobgraph.Limits{}, "job_graph.vertices[0].id"},
		{"duplicate vertex ids", graph([]*jobplanev1.JobVertex{vertex("a", 1), vertex("a", 1)}), jobgraph.Limits{}, "job_graph.vertices[1].id"},
		{"edge from unknown vertex", graph([]*jobplanev1.JobVertex{vertex("a", 1)}, edge("x", "a")), jobgraph.Limits{}, "job_graph.edges[0].source_vertex_id"},
		{"edge to unknown vertex", graph([]*jobplanev1.JobVertex{vertex("a", 1)}, edge("a", "x")), jobgraph.Limits{}, "job_graph.edges[0].target_vertex_id"},
		{"self loop", graph([]*jobplanev1.JobVertex{vertex("a", 1)}, edge("a", "a")), jobgraph.Limits{}, "job_graph.edges[0]"},
		{"cycle", graph([]*jobplanev1.JobVertex{vertex("a", 1), vertex("b", 1), vertex("c", 1)}, edge("a", "b"), edge("b", "c"), edge("c", "a")), jobgraph.Limits{}, "job_graph.edges"},
		{"zero parallelism", graph([]*jobplanev1.JobVertex{vertex("a", 0)}), jobgraph.Limits{}, "job_graph.vertices[0].parallelism"},
		{"over max parallelism", graph([]*jobplanev1.JobVertex{{Id: "a", Invokable: "noop", Parallelism: 5, MaxParallelism: 4}}), jobgraph.Limits{}, "job_graph.vertices[0].parallelism"},
		{"missing invokable", graph([]*jobplanev1.JobVertex{{Id: "a", Parallelism: 1}}), jobgraph.Limits{}, "job_graph.vertices[0].invokable"},
		{"too many vertices", graph(many), jobgraph.Limits{MaxVertices: 3}, "job_graph.vertices"},
		{"too many subtasks", graph([]*jobplanev1.JobVertex{vertex("a", 3), vertex("b", 3)}), jobgraph.Limits{MaxSubtasks: 5}, "job_graph.vertices"},
		{"edge without distribution", graph([]*jobplanev1.JobVertex{vertex("a", 1), vertex("b", 1)}, &jobplanev1.JobEdge{SourceVertexId: "a", TargetVertexId: "b", ResultType: jobplanev1.ResultPartitionType_RESULT_PARTITION_TYPE_BLOCKING}), jobgraph.Limits{}, "job_graph.edges[0].distribution"},
		{"fixed delay with negative attempts", &jobplanev1.JobGraph{Vertices: []*jobplanev1.JobVertex{vertex("a", 1)}, Config: &jobplanev1.JobConfig{RestartStrategy: &jobplanev1.RestartStrategy{Strategy: &jobplanev1.RestartStrategy_FixedDelay_{FixedDelay: &jobplanev1.RestartStrategy_FixedDelay{Attempts: -1}}}}}, jobgraph.Limits{}, "job_graph.config.restart_strategy.fixed_delay.attempts"},
		{"override below one", &jobplanev1.JobGraph{Vertices: []*jobplanev1.JobVertex{vertex("a", 1)}, Config: &jobplanev1.JobConfig{ParallelismOverrides: map[string]int32{"a": 0}}}, jobgraph.Limits{}, `job_graph.config.parallelism_overrides["a"]`},
		{"graph over the size limit", graph([]*jobplanev1.JobVertex{{Id: "a", Invokable: "noop", Parallelism: 1, Config: map[string]string{"blob": strings.Repeat("x", 2048)}}}), jobgraph.Limits{MaxEncodedBytes: 1024}, "job_graph"},
		{"negative heartbeat timeout", &jobplanev1.JobGraph{Vertices: []*jobplanev1.JobVertex{vertex("a", 1)}, Config: &jobplanev1.JobConfig{ClientHeartbeatTimeout: durationpb.New(-1)}}, jobgraph.Limits{}, "job_graph.config.client_heartbeat_timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := jobgraph.Prepare(tc.g, nil, tc.limits)
			var jerr *jobgraph.Error
			if !errors.As(err, &jerr) {
				t.Fatalf("err = %v, want a *jobgraph.Error", err)
			}
			for _, v := range jerr.Violations {
				if v.Field == tc.field {
					return
				}
			}
			t.Errorf("violations %+v lack field %q", jerr.Violations, tc.field)
		})
	}
}

func TestPrepareAppliesOverrides(t *testing.T) {
	t.Parallel()
	g := graph([]*jobplanev1.JobVertex{vertex("a", 1), vertex("b", 1), vertex("c", 1)}, edge("a", "b"))
	g.Config = &jobplanev1.JobConfig{ParallelismOverrides: map[string]int32{"b": 3, "ghost": 9}}
	before := proto.CloneOf(g)
	got, err := jobgraph.Prepare(g, map[string]int32{"a": 2, "b": 5}, jobgraph.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int32{"a": 2, "b": 3, "c": 1} // cluster first, job wins, unknown ids ignored
	for _, v := range got.GetVertices() {
		if v.GetParallelism() != want[v.GetId()] {
			t.Errorf("vertex %s parallelism = %d, want %d", v.GetId(), v.GetParallelism(), want[v.GetId()])
		}
	}
	if !proto.Equal(g, before) {
		t.Error("Prepare modified the submitted graph")
	}
	if n := jobgraph.Subtasks(got); n != 6 {
		t.Errorf("Subtasks = %d, want 6", n)
	}
}

// A Duration that is not valid (seconds and nanos of two signs, or nanos
// of a second or more) is refused: one length has one encoding, so plans
// that mean the same have one digest.
func TestInvalidDurationsRefused(t *testing.T) {
	t.Parallel()
	for name, d := range map[string]*durationpb.Duration{
		"nanos of a second":  {Nanos: 1e9},
		"two signs":          {Seconds: 1, Nanos: -1e9 + 1},
		"negative nanos < 0": {Seconds: 2, Nanos: -1},
	} {
		g := graph([]*jobplanev1.JobVertex{vertex("a", 1)})
		g.Config = &jobplanev1.JobConfig{RestartStrategy: &jobplanev1.RestartStrategy{Strategy: &jobplanev1.RestartStrategy_FixedDelay_{
			FixedDelay: &jobplanev1.RestartStrategy_FixedDelay{Attempts: 1, Delay: d},
		}}}
		_, err := jobgraph.Prepare(g, nil, jobgraph.Limits{})
		var jerr *jobgraph.Error
		if !errors.As(err, &jerr) || len(jerr.Violations) != 1 || jerr.Violations[0].Field != "job_graph.config.restart_strategy.fixed_delay.delay" {
			t.Errorf("%s: Prepare = %v; want one violation on the delay", name, err)
		}
	}
}

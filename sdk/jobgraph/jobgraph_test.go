package jobgraph_test

import (
	"errors"
	"strings"
	"testing"
	"time"

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

// A fixed or exponential delay says its bound: attempts 0 (unlimited
// before contract 1.2) is refused naming the field and saying what to
// write instead, attempts together with unlimited is refused naming
// unlimited, and either alone is accepted.
func TestRestartBound(t *testing.T) {
	t.Parallel()
	fixed := func(attempts int32, unlimited bool) *jobplanev1.RestartStrategy {
		return &jobplanev1.RestartStrategy{Strategy: &jobplanev1.RestartStrategy_FixedDelay_{FixedDelay: &jobplanev1.RestartStrategy_FixedDelay{
			Attempts: attempts, Unlimited: unlimited}}}
	}
	expo := func(attempts int32, unlimited bool) *jobplanev1.RestartStrategy {
		return &jobplanev1.RestartStrategy{Strategy: &jobplanev1.RestartStrategy_ExponentialDelay_{ExponentialDelay: &jobplanev1.RestartStrategy_ExponentialDelay{
			InitialDelay: durationpb.New(time.Second), MaxDelay: durationpb.New(time.Minute), Attempts: attempts, Unlimited: unlimited}}}
	}
	const path = "job_graph.config.restart_strategy."
	for _, tc := range []struct {
		name  string
		rs    *jobplanev1.RestartStrategy
		field string // "" when accepted
		says  string
	}{
		{"fixed, attempts 0", fixed(0, false), path + "fixed_delay.attempts", "0 no longer means unlimited"},
		{"fixed, attempts and unlimited", fixed(3, true), path + "fixed_delay.unlimited", "set one or the other"},
		{"fixed, negative attempts", fixed(-1, false), path + "fixed_delay.attempts", "must not be negative"},
		{"fixed, attempts", fixed(3, false), "", ""},
		{"fixed, unlimited", fixed(0, true), "", ""},
		{"exponential, attempts 0", expo(0, false), path + "exponential_delay.attempts", "0 no longer means unlimited"},
		{"exponential, attempts and unlimited", expo(1, true), path + "exponential_delay.unlimited", "set one or the other"},
		{"exponential, attempts", expo(6, false), "", ""},
		{"exponential, unlimited", expo(0, true), "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := graph([]*jobplanev1.JobVertex{vertex("a", 1)})
			g.Config = &jobplanev1.JobConfig{RestartStrategy: tc.rs}
			_, err := jobgraph.Prepare(g, nil, jobgraph.Limits{})
			if tc.field == "" {
				if err != nil {
					t.Fatalf("Prepare = %v, want it accepted", err)
				}
				return
			}
			var jerr *jobgraph.Error
			if !errors.As(err, &jerr) || len(jerr.Violations) != 1 {
				t.Fatalf("Prepare = %v, want one violation of %s", err, tc.field)
			}
			if v := jerr.Violations[0]; v.Field != tc.field || !strings.Contains(v.Description, tc.says) {
				t.Errorf("violation %+v, want field %s saying %q", v, tc.field, tc.says)
			}
		})
	}
	withVertex := func(name string) *jobgraph.Builder {
		b := jobgraph.NewBuilder(name)
		b.Vertex("v", "noop")
		return b
	}
	if _, err := withVertex("forever").UnlimitedRestart(time.Second).Build(); err != nil {
		t.Errorf("UnlimitedRestart: Build = %v", err)
	}
	if _, err := withVertex("zero").FixedDelayRestart(0, time.Second).Build(); err == nil {
		t.Error("FixedDelayRestart(0): Build accepted it")
	}
}

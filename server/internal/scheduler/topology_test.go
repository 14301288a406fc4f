package scheduler_test

import (
	"fmt"
	"slices"
	"testing"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/server/internal/scheduler"
)

func vertex(id string, p int32) *jobplanev1.JobVertex {
	return &jobplanev1.JobVertex{Id: id, Invokable: "noop", Parallelism: p}
}

func edge(from, to string, allToAll, blocking bool) *jobplanev1.JobEdge {
	e := &jobplanev1.JobEdge{SourceVertexId: from, TargetVertexId: to,
		Distribution: jobplanev1.DistributionPattern_DISTRIBUTION_PATTERN_POINTWISE,
		ResultType:   jobplanev1.ResultPartitionType_RESULT_PARTITION_TYPE_PIPELINED}
	if allToAll {
		e.Distribution = jobplanev1.DistributionPattern_DISTRIBUTION_PATTERN_ALL_TO_ALL
	}
	if blocking {
		e.ResultType = jobplanev1.ResultPartitionType_RESULT_PARTITION_TYPE_BLOCKING
	}
	return e
}

func build(t testing.TB, vs []*jobplanev1.JobVertex, es ...*jobplanev1.JobEdge) *scheduler.Topology {
	t.Helper()
	top, err := scheduler.Build(&jobplanev1.JobGraph{Vertices: vs, Edges: es})
	if err != nil {
		t.Fatal(err)
	}
	return top
}

func TestRegionsAndFailover(t *testing.T) {
	t.Parallel()
	// a =pipelined, all-to-all=> b =blocking, all-to-all=> c
	top := build(t, []*jobplanev1.JobVertex{vertex("a", 4), vertex("b", 4), vertex("c", 4)},
		edge("a", "b", true, false), edge("b", "c", true, true))
	if got := top.Regions(); got != 5 {
		t.Fatalf("regions = %d, want 5 (a+b together, each c alone)", got)
	}
	ab := top.RegionOf(top.ExecutionVertex(0, 0))
	for v := range 2 {
		for s := range 4 {
			if r := top.RegionOf(top.ExecutionVertex(v, s)); r != ab {
				t.Errorf("vertex %d subtask %d in region %d, want %d", v, s, r, ab)
			}
		}
	}
	c2 := top.RegionOf(top.ExecutionVertex(2, 2))
	if got := top.Producers(c2); !slices.Equal(got, []int{ab}) {
		t.Errorf("producers of c's region = %v, want [%d]", got, ab)
	}
	if got := top.Producers(ab); len(got) != 0 {
		t.Errorf("producers of the source region = %v, want none", got)
	}
	// A failure in the pipelined region restarts it and every consumer.
	if got := top.RestartSet(top.ExecutionVertex(0, 1)); len(got) != 5 {
		t.Errorf("restart set of a = %v, want all 5 regions", got)
	}
	// A failure in one consumer restarts only that consumer.
	if got := top.RestartSet(top.ExecutionVertex(2, 2)); !slices.Equal(got, []int{c2}) {
		t.Errorf("restart set of c2 = %v, want [%d]", got, c2)
	}
}

func TestPointwise(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		p, q        int32
		wantRegions int
	}{
		{4, 4, 4}, // one-to-one
		{4, 2, 2}, // targets consume two sources each
		{2, 4, 2}, // sources feed two targets each
		{3, 2, 2}, // uneven fan-in: [0] and [1,2]
	} {
		top := build(t, []*jobplanev1.JobVertex{vertex("a", tc.p), vertex("b", tc.q)}, edge("a", "b", false, false))
		if got := top.Regions(); got != tc.wantRegions {
			t.Errorf("pointwise %d->%d: %d regions, want %d", tc.p, tc.q, got, tc.wantRegions)
		}
	}
	// Blocking pointwise 4->2: each consumer depends on its two producers.
	top := build(t, []*jobplanev1.JobVertex{vertex("a", 4), vertex("b", 2)}, edge("a", "b", false, true))
	b1 := top.RegionOf(top.ExecutionVertex(1, 1))
	want := []int{top.RegionOf(top.ExecutionVertex(0, 2)), top.RegionOf(top.ExecutionVertex(0, 3))}
	got := top.Producers(b1)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("producers of b1 = %v, want %v", got, want)
	}
	if rs := top.RestartSet(top.ExecutionVertex(0, 0)); len(rs) != 2 {
		t.Errorf("restart set of a0 = %v, want a0 and b0", rs)
	}
}

func allToAll(parallelism int32, blocking bool) *jobplanev1.JobGraph {
	return &jobplanev1.JobGraph{
		Vertices: []*jobplanev1.JobVertex{vertex("a", parallelism), vertex("b", parallelism)},
		Edges:    []*jobplanev1.JobEdge{edge("a", "b", true, blocking)},
	}
}

func BenchmarkBuild(b *testing.B) {
	for _, p := range []int32{4000, 10000} {
		for _, blocking := range []bool{false, true} {
			g := allToAll(p, blocking)
			b.Run(fmt.Sprintf("2x%d-all-to-all-blocking=%v", p, blocking), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := scheduler.Build(g); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func BenchmarkRestartSet(b *testing.B) {
	top := build(b, allToAll(10000, true).GetVertices(), allToAll(10000, true).GetEdges()...)
	b.ReportAllocs()
	for b.Loop() {
		if got := top.RestartSet(top.ExecutionVertex(0, 7)); len(got) != 10001 {
			b.Fatalf("restart set has %d regions", len(got))
		}
	}
}

func TestVertexOf(t *testing.T) {
	t.Parallel()
	top := build(t, []*jobplanev1.JobVertex{vertex("a", 3), vertex("b", 1), vertex("c", 2)})
	for v, p := range []int{3, 1, 2} {
		for s := range p {
			if gv, gs := top.VertexOf(top.ExecutionVertex(v, s)); gv != v || gs != s {
				t.Errorf("VertexOf(ExecutionVertex(%d, %d)) = %d, %d", v, s, gv, gs)
			}
		}
	}
}

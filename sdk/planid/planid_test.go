package planid_test

import (
	"encoding/hex"
	"math"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/planid"
)

// example is the graph whose digest job_graph.proto gives, so that other
// implementations can check theirs.
func example() *jobplanev1.JobGraph {
	return &jobplanev1.JobGraph{
		Name: "example",
		Vertices: []*jobplanev1.JobVertex{
			{Id: "source", Invokable: "noop", Parallelism: 2, Config: map[string]string{"b": "2", "a": "1"}},
			{Id: "sink", Name: "the sink", Invokable: "noop", Parallelism: 1, MaxParallelism: 4},
		},
		Edges: []*jobplanev1.JobEdge{{
			SourceVertexId: "source", TargetVertexId: "sink",
			Distribution: jobplanev1.DistributionPattern_DISTRIBUTION_PATTERN_ALL_TO_ALL,
			ResultType:   jobplanev1.ResultPartitionType_RESULT_PARTITION_TYPE_BLOCKING,
		}},
		Config: &jobplanev1.JobConfig{
			RestartStrategy: &jobplanev1.RestartStrategy{Strategy: &jobplanev1.RestartStrategy_ExponentialDelay_{ExponentialDelay: &jobplanev1.RestartStrategy_ExponentialDelay{
				InitialDelay: durationpb.New(1e9), MaxDelay: durationpb.New(60e9), Multiplier: 1.5, Jitter: 0.25, Attempts: 5,
			}}},
			ParallelismOverrides: map[string]int32{"source": 3},
		},
	}
}

// The digest of the example is fixed: it is in the contract.
func TestDigestOfTheExample(t *testing.T) {
	const want = "6cfbc0aee7a4f6819b1e82bbc7c1cafd1feda066b2a6e3776219c767e33fab96"
	if got := hex.EncodeToString(planid.Digest(example())); got != want {
		t.Errorf("Digest(example) = %s, want %s", got, want)
	}
}

// The canonical encoding is protobuf's binary encoding: Go's
// deterministic encoding of a normalized graph decodes to the same
// message, and for a graph whose every field is set, is the same bytes.
func TestCanonicalIsTheBinaryEncoding(t *testing.T) {
	g := planid.Normalize(example())
	canonical := planid.Canonical(g)
	decoded := new(jobplanev1.JobGraph)
	if err := proto.Unmarshal(canonical, decoded); err != nil || !proto.Equal(decoded, g) {
		t.Fatalf("the canonical encoding decodes to %v, %v; want %v", decoded, err, g)
	}
	det, err := proto.MarshalOptions{Deterministic: true}.Marshal(g)
	if err != nil {
		t.Fatal(err)
	}
	if string(det) != string(canonical) {
		t.Errorf("canonical encoding\n%x\ndiffers from Go's deterministic one\n%x", canonical, det)
	}
}

// However it was encoded, a graph has one digest.
func TestDigestIgnoresTheEncoding(t *testing.T) {
	g := example()
	want := planid.Digest(g)
	j, err := protojson.Marshal(g)
	if err != nil {
		t.Fatal(err)
	}
	fromJSON := new(jobplanev1.JobGraph)
	if err := protojson.Unmarshal(j, fromJSON); err != nil {
		t.Fatal(err)
	}
	// Map entries in another order, defaults written out, fields in
	// another order.
	const handWritten = `{"config": {"parallelismOverrides": {"source": 3}, "restartStrategy": {"exponentialDelay": {
		"attempts": 5, "jitter": 0.25, "multiplier": 1.5, "maxDelay": "60s", "initialDelay": "1s"}}},
		"edges": [{"resultType": "RESULT_PARTITION_TYPE_BLOCKING", "distribution": "DISTRIBUTION_PATTERN_ALL_TO_ALL", "targetVertexId": "sink", "sourceVertexId": "source"}],
		"vertices": [
			{"maxParallelism": 0, "config": {"a": "1", "b": "2"}, "parallelism": 2, "invokable": "noop", "name": "", "id": "source"},
			{"maxParallelism": 4, "parallelism": 1, "invokable": "noop", "name": "the sink", "id": "sink"}],
		"name": "example"}`
	byHand := new(jobplanev1.JobGraph)
	if err := protojson.Unmarshal([]byte(handWritten), byHand); err != nil {
		t.Fatal(err)
	}
	for name, other := range map[string]*jobplanev1.JobGraph{"JSON": fromJSON, "hand-written JSON": byHand} {
		if got := planid.Digest(other); string(got) != string(want) {
			t.Errorf("digest of the graph from %s = %x, want %x", name, got, want)
		}
		if !planid.Same(g, other) {
			t.Errorf("Same(graph, graph from %s) = false", name)
		}
	}
}

// Values the contract gives one meaning have one digest; anything else
// that differs has another.
func TestNormalization(t *testing.T) {
	base := func() *jobplanev1.JobGraph {
		return &jobplanev1.JobGraph{Vertices: []*jobplanev1.JobVertex{
			{Id: "a", Invokable: "noop", Parallelism: 1},
			{Id: "b", Invokable: "noop", Parallelism: 1},
		}}
	}
	with := func(f func(g *jobplanev1.JobGraph)) *jobplanev1.JobGraph {
		g := base()
		f(g)
		return g
	}
	config := func(c *jobplanev1.JobConfig) *jobplanev1.JobGraph {
		return with(func(g *jobplanev1.JobGraph) { g.Config = c })
	}
	strategy := func(s *jobplanev1.RestartStrategy) *jobplanev1.JobGraph {
		return config(&jobplanev1.JobConfig{RestartStrategy: s})
	}
	exponential := func(e *jobplanev1.RestartStrategy_ExponentialDelay) *jobplanev1.JobGraph {
		return strategy(&jobplanev1.RestartStrategy{Strategy: &jobplanev1.RestartStrategy_ExponentialDelay_{ExponentialDelay: e}})
	}
	fixed := func(d *durationpb.Duration) *jobplanev1.JobGraph {
		return strategy(&jobplanev1.RestartStrategy{Strategy: &jobplanev1.RestartStrategy_FixedDelay_{FixedDelay: &jobplanev1.RestartStrategy_FixedDelay{Attempts: 1, Delay: d}}})
	}
	same := map[string]*jobplanev1.JobGraph{
		"empty config":           config(&jobplanev1.JobConfig{}),
		"empty restart strategy": strategy(&jobplanev1.RestartStrategy{}),
		"restart strategy none":  strategy(&jobplanev1.RestartStrategy{Strategy: &jobplanev1.RestartStrategy_None{None: &jobplanev1.RestartStrategy_NoRestart{}}}),
		"zero heartbeat timeout": config(&jobplanev1.JobConfig{ClientHeartbeatTimeout: durationpb.New(0)}),
		"pipelined region":       config(&jobplanev1.JobConfig{SchedulingMode: jobplanev1.SchedulingMode_SCHEDULING_MODE_PIPELINED_REGION}),
		"override of no vertex":  config(&jobplanev1.JobConfig{ParallelismOverrides: map[string]int32{"nope": 4}}),
		"name equal to the id":   with(func(g *jobplanev1.JobGraph) { g.Vertices[0].Name = "a" }),
		"empty vertex config":    with(func(g *jobplanev1.JobGraph) { g.Vertices[0].Config = map[string]string{} }),
	}
	for name, g := range same {
		if string(planid.Digest(g)) != string(planid.Digest(base())) || !planid.Same(g, base()) {
			t.Errorf("%s: another plan than the graph without it", name)
		}
	}
	pairs := map[string][2]*jobplanev1.JobGraph{
		"fixed delay of zero and unset": {fixed(durationpb.New(0)), fixed(nil)},
		"jitter of negative zero and 0": {exponential(&jobplanev1.RestartStrategy_ExponentialDelay{InitialDelay: durationpb.New(1e9), Jitter: math.Copysign(0, -1)}), exponential(&jobplanev1.RestartStrategy_ExponentialDelay{InitialDelay: durationpb.New(1e9)})},
		"multiplier 2 and 0":            {exponential(&jobplanev1.RestartStrategy_ExponentialDelay{InitialDelay: durationpb.New(1e9), Multiplier: 2}), exponential(&jobplanev1.RestartStrategy_ExponentialDelay{InitialDelay: durationpb.New(1e9)})},
	}
	for name, p := range pairs {
		if string(planid.Digest(p[0])) != string(planid.Digest(p[1])) || !planid.Same(p[0], p[1]) {
			t.Errorf("%s: two plans", name)
		}
	}
	different := map[string]*jobplanev1.JobGraph{
		"vertices in another order": with(func(g *jobplanev1.JobGraph) { g.Vertices[0], g.Vertices[1] = g.Vertices[1], g.Vertices[0] }),
		"another parallelism":       with(func(g *jobplanev1.JobGraph) { g.Vertices[1].Parallelism = 2 }),
		"another name":              with(func(g *jobplanev1.JobGraph) { g.Vertices[0].Name = "b" }),
		"a vertex config":           with(func(g *jobplanev1.JobGraph) { g.Vertices[0].Config = map[string]string{"k": ""} }),
		"an override":               config(&jobplanev1.JobConfig{ParallelismOverrides: map[string]int32{"a": 2}}),
		"a restart strategy":        fixed(nil),
		"eager scheduling":          config(&jobplanev1.JobConfig{SchedulingMode: jobplanev1.SchedulingMode_SCHEDULING_MODE_EAGER}),
		"a graph name":              with(func(g *jobplanev1.JobGraph) { g.Name = "x" }),
	}
	for name, g := range different {
		if string(planid.Digest(g)) == string(planid.Digest(base())) || planid.Same(g, base()) {
			t.Errorf("%s: the same plan as the graph without it", name)
		}
	}
	// unlimited (field 3 of a fixed delay, 7 of an exponential one, since
	// contract 1.2) is part of the plan: a 1.1 plan with attempts 0 and
	// the 1.2 plan that says unlimited are two plans.
	unlimited := func(u bool) [2]*jobplanev1.JobGraph {
		return [2]*jobplanev1.JobGraph{
			strategy(&jobplanev1.RestartStrategy{Strategy: &jobplanev1.RestartStrategy_FixedDelay_{FixedDelay: &jobplanev1.RestartStrategy_FixedDelay{Unlimited: u}}}),
			exponential(&jobplanev1.RestartStrategy_ExponentialDelay{InitialDelay: durationpb.New(1e9), Unlimited: u}),
		}
	}
	for i, kind := range []string{"fixed", "exponential"} {
		if a, b := unlimited(true)[i], unlimited(false)[i]; string(planid.Digest(a)) == string(planid.Digest(b)) || planid.Same(a, b) {
			t.Errorf("%s delay: unlimited and attempts 0 are the same plan", kind)
		}
	}
	if g := base(); planid.Normalize(g) == g {
		t.Error("Normalize returned its argument, not a copy")
	}
}

package jobgraph_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/jobgraph"
	"github.com/jobplane/jobplane/sdk/planid"
)

// fuzzLimits are small, so that fuzzed graphs reach them.
var fuzzLimits = jobgraph.Limits{MaxVertices: 64, MaxSubtasks: 4096, MaxEncodedBytes: 64 << 10}

// fuzzSeeds are graphs worth starting from: valid ones of every shape and
// restart strategy, and graphs that break rules.
func fuzzSeeds() []*jobplanev1.JobGraph {
	d := durationpb.New
	return []*jobplanev1.JobGraph{
		graph([]*jobplanev1.JobVertex{vertex("a", 2), vertex("b", 3)}, edge("a", "b")),
		graph([]*jobplanev1.JobVertex{vertex("a", 1), vertex("b", 1), vertex("c", 1), vertex("d", 1)},
			edge("a", "b"), edge("a", "c"), edge("b", "d"), edge("c", "d")),
		graph([]*jobplanev1.JobVertex{vertex("a", 1), vertex("b", 1)}, edge("a", "b"), edge("b", "a")),
		graph([]*jobplanev1.JobVertex{vertex("a", 1), vertex("a", 0), vertex("", 1)}, edge("a", "x")),
		{Name: "cfg", Vertices: []*jobplanev1.JobVertex{{Id: "v", Name: "v", Invokable: "sleep", Parallelism: 2, MaxParallelism: 4, Config: map[string]string{"duration": "1s"}}},
			Config: &jobplanev1.JobConfig{
				ParallelismOverrides:   map[string]int32{"v": 3, "nobody": 5},
				ClientHeartbeatTimeout: d(time.Second),
				RestartStrategy: &jobplanev1.RestartStrategy{Strategy: &jobplanev1.RestartStrategy_ExponentialDelay_{ExponentialDelay: &jobplanev1.RestartStrategy_ExponentialDelay{
					InitialDelay: d(time.Millisecond), MaxDelay: d(time.Second), Multiplier: 2, Jitter: 0.1, Attempts: 3, ResetAfter: d(time.Minute),
				}}},
			}},
		{Vertices: []*jobplanev1.JobVertex{vertex("v", 1)}, Config: &jobplanev1.JobConfig{RestartStrategy: &jobplanev1.RestartStrategy{
			Strategy: &jobplanev1.RestartStrategy_FixedDelay_{FixedDelay: &jobplanev1.RestartStrategy_FixedDelay{Attempts: 2, Delay: &durationpb.Duration{Seconds: 1, Nanos: -1}}},
		}}},
		{Vertices: []*jobplanev1.JobVertex{vertex("v", 1)}, Config: &jobplanev1.JobConfig{RestartStrategy: &jobplanev1.RestartStrategy{
			Strategy: &jobplanev1.RestartStrategy_FailureRate_{FailureRate: &jobplanev1.RestartStrategy_FailureRate{MaxFailures: 1, Interval: d(time.Minute), Delay: d(0)}},
		}}},
	}
}

// Prepare never panics, and what it decides holds up: a refusal lists
// violations under job_graph (or cluster), an accepted graph is within
// the limits, and preparing it again, or after a trip through the binary
// or the JSON encoding, accepts it unchanged with the same plan digest.
// The submitted graph is never modified.
func FuzzPrepare(f *testing.F) {
	for _, g := range fuzzSeeds() {
		b, err := proto.Marshal(g)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, "", int32(0))
		f.Add(b, "a", int32(7))
	}
	f.Fuzz(func(t *testing.T, data []byte, overrideID string, override int32) {
		var g jobplanev1.JobGraph
		if proto.Unmarshal(data, &g) != nil || hasUnknown(g.ProtoReflect()) {
			return // the public API refuses unknown fields before Prepare
		}
		var overrides map[string]int32
		if overrideID != "" {
			overrides = map[string]int32{overrideID: override}
		}
		before, _ := proto.MarshalOptions{Deterministic: true}.Marshal(&g)
		out, err := jobgraph.Prepare(&g, overrides, fuzzLimits)
		if after, _ := (proto.MarshalOptions{Deterministic: true}).Marshal(&g); string(after) != string(before) {
			t.Fatal("Prepare modified the submitted graph")
		}
		if err != nil {
			var jerr *jobgraph.Error
			if !errors.As(err, &jerr) || len(jerr.Violations) == 0 {
				t.Fatalf("Prepare failed with %v, want a *jobgraph.Error with violations", err)
			}
			for _, v := range jerr.Violations {
				if !strings.HasPrefix(v.Field, "job_graph") && !strings.HasPrefix(v.Field, "cluster") {
					t.Errorf("violation of field %q: not under job_graph or cluster", v.Field)
				}
			}
			return
		}
		if n := len(out.GetVertices()); n == 0 || n > fuzzLimits.MaxVertices {
			t.Fatalf("accepted %d vertices, limit %d", n, fuzzLimits.MaxVertices)
		}
		if n := jobgraph.Subtasks(out); n < len(out.GetVertices()) || n > fuzzLimits.MaxSubtasks {
			t.Fatalf("accepted %d subtasks, limit %d", n, fuzzLimits.MaxSubtasks)
		}
		if e := out.GetConfig().GetRestartStrategy().GetExponentialDelay(); e != nil {
			// The contract's ranges, which NaN, failing every comparison,
			// must not slip through.
			if m := e.GetMultiplier(); m != 0 && !(m >= 1 && m <= math.MaxFloat64) {
				t.Fatalf("accepted the multiplier %v: the contract wants 0 or a finite number of at least 1", m)
			}
			if j := e.GetJitter(); !(j >= 0 && j <= 1) {
				t.Fatalf("accepted the jitter %v: the contract wants [0, 1]", j)
			}
		}
		again, err := jobgraph.Prepare(out, nil, fuzzLimits)
		if err != nil || !proto.Equal(again, out) {
			t.Fatalf("preparing a prepared graph: %v (changed: %v)", err, !proto.Equal(again, out))
		}
		digest := string(planid.Digest(out))
		bin, err := proto.Marshal(out)
		if err != nil {
			t.Fatal(err)
		}
		js, err := protojson.Marshal(out)
		if err != nil {
			t.Fatalf("a prepared graph does not encode as JSON: %v", err)
		}
		for name, decode := range map[string]func(*jobplanev1.JobGraph) error{
			"binary": func(m *jobplanev1.JobGraph) error { return proto.Unmarshal(bin, m) },
			"JSON":   func(m *jobplanev1.JobGraph) error { return protojson.Unmarshal(js, m) },
		} {
			var decoded jobplanev1.JobGraph
			if err := decode(&decoded); err != nil {
				t.Fatalf("%s: the prepared graph does not decode: %v", name, err)
			}
			re, err := jobgraph.Prepare(&decoded, nil, fuzzLimits)
			if err != nil {
				t.Fatalf("%s: the prepared graph, decoded, is refused: %v", name, err)
			}
			if !proto.Equal(re, out) || string(planid.Digest(re)) != digest {
				t.Fatalf("%s: the prepared graph, decoded, is another plan", name)
			}
		}
	})
}

// hasUnknown reports whether m or a message in it holds unknown fields.
func hasUnknown(m protoreflect.Message) bool {
	if len(m.GetUnknown()) > 0 {
		return true
	}
	found := false
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				found = found || hasUnknown(mv.Message())
				return !found
			})
		case fd.IsList() && fd.Message() != nil:
			for i := 0; i < v.List().Len() && !found; i++ {
				found = hasUnknown(v.List().Get(i).Message())
			}
		case !fd.IsMap() && !fd.IsList() && fd.Message() != nil:
			found = found || hasUnknown(v.Message())
		}
		return !found
	})
	return found
}

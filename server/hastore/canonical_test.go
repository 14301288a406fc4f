package hastore_test

import (
	"errors"
	"math"
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/server/hastore"
)

func exponential(multiplier, jitter float64) *hastorev1.ExecutionPlan {
	return &hastorev1.ExecutionPlan{JobId: "j", JobGraph: &jobplanev1.JobGraph{
		Vertices: []*jobplanev1.JobVertex{{Id: "a", Config: map[string]string{"x": "1", "y": "2", "z": "3"}}},
		Config: &jobplanev1.JobConfig{RestartStrategy: &jobplanev1.RestartStrategy{Strategy: &jobplanev1.RestartStrategy_ExponentialDelay_{
			ExponentialDelay: &jobplanev1.RestartStrategy_ExponentialDelay{Multiplier: multiplier, Jitter: jitter}}}},
	}}
}

// Two messages are the same when their canonical encodings are: floats by
// their bits, maps whatever their order.
func TestSameByCanonicalEncoding(t *testing.T) {
	nan1, nan2 := math.Float64frombits(0x7ff8000000000001), math.Float64frombits(0x7ff8000000000002)
	for _, c := range []struct {
		name string
		a, b *hastorev1.ExecutionPlan
		same bool
	}{
		{"equal", exponential(1.5, 0), exponential(1.5, 0), true},
		{"0.0 and -0.0", exponential(1.5, 0), exponential(1.5, math.Copysign(0, -1)), false},
		{"a NaN and itself", exponential(nan1, 0), exponential(nan1, 0), true},
		{"two NaNs of other bits", exponential(nan1, 0), exponential(nan2, 0), false},
		{"other values", exponential(1.5, 0), exponential(2, 0), false},
	} {
		if got := hastore.Same(c.a, c.b); got != c.same {
			t.Errorf("%s: Same = %v, want %v", c.name, got, c.same)
		}
	}
	// Go marshals maps in a random order unless deterministic: the
	// canonical encoding of one map is always the same.
	first, err := hastore.Canonical(exponential(1.5, 0))
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		if again, _ := hastore.Canonical(exponential(1.5, 0)); string(again) != string(first) {
			t.Fatalf("two canonical encodings of one plan differ:\n%x\n%x", first, again)
		}
	}
}

// A plan with an unknown field or a Duration or Timestamp that is not
// normalized is refused, with a violation naming the field.
func TestValidateCanonical(t *testing.T) {
	unknown := exponential(1.5, 0)
	cfg := unknown.GetJobGraph().GetConfig().ProtoReflect()
	cfg.SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 1))
	badDuration := exponential(1.5, 0)
	badDuration.JobGraph.Config.RestartStrategy.GetExponentialDelay().InitialDelay = &durationpb.Duration{Seconds: 1, Nanos: -1}
	badTimestamp := exponential(1.5, 0)
	badTimestamp.SubmitTime = &timestamppb.Timestamp{Seconds: 1, Nanos: 1e9}
	good := exponential(1.5, 0)
	good.SubmitTime = &timestamppb.Timestamp{Seconds: 1, Nanos: 5}
	good.JobGraph.Config.RestartStrategy.GetExponentialDelay().InitialDelay = &durationpb.Duration{Seconds: -1, Nanos: -5}
	for _, c := range []struct {
		name  string
		plan  *hastorev1.ExecutionPlan
		field string
	}{
		{"an unknown field", unknown, "plan.job_graph.config.99"},
		{"a Duration of two signs", badDuration, "plan.job_graph.config.restart_strategy.exponential_delay.initial_delay"},
		{"a Timestamp's nanos of a whole second", badTimestamp, "plan.submit_time"},
		{"normalized values", good, ""},
	} {
		err := hastore.ValidateCanonical("plan", c.plan)
		var ve *hastore.ValidationError
		switch {
		case c.field == "" && err != nil:
			t.Errorf("%s: %v; want no violation", c.name, err)
		case c.field != "" && (!errors.As(err, &ve) || !slices.ContainsFunc(ve.Violations, func(v hastore.FieldViolation) bool { return v.Field == c.field })):
			t.Errorf("%s: %v; want a violation of %s", c.name, err, c.field)
		}
	}
}

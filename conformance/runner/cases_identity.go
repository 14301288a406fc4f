package runner

import (
	"fmt"
	"math"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
)

// identityBase is a graph with every part plan identity covers: vertices
// with config, two edges, parallelism overrides, an exponential restart
// strategy. Its vertex "c" runs the gate named gate.
func identityBase(gate string) *jobplanev1.JobGraph {
	edge := func(from string) *jobplanev1.JobEdge {
		return &jobplanev1.JobEdge{SourceVertexId: from, TargetVertexId: "c",
			Distribution: jobplanev1.DistributionPattern_DISTRIBUTION_PATTERN_ALL_TO_ALL,
			ResultType:   jobplanev1.ResultPartitionType_RESULT_PARTITION_TYPE_PIPELINED}
	}
	return &jobplanev1.JobGraph{
		Name: "identity",
		Vertices: []*jobplanev1.JobVertex{
			{Id: "a", Invokable: "noop", Parallelism: 1, Config: map[string]string{"k": "v"}},
			{Id: "b", Invokable: "noop", Parallelism: 1},
			{Id: "c", Invokable: "gate", Parallelism: 1, Config: map[string]string{"gate": gate}},
		},
		Edges: []*jobplanev1.JobEdge{edge("a"), edge("b")},
		Config: &jobplanev1.JobConfig{
			ParallelismOverrides: map[string]int32{"a": 2},
			RestartStrategy: &jobplanev1.RestartStrategy{Strategy: &jobplanev1.RestartStrategy_ExponentialDelay_{
				ExponentialDelay: &jobplanev1.RestartStrategy_ExponentialDelay{
					InitialDelay: durationpb.New(time.Second), MaxDelay: durationpb.New(time.Minute), Attempts: 5,
				}}},
		},
	}
}

func exponential(g *jobplanev1.JobGraph) *jobplanev1.RestartStrategy_ExponentialDelay {
	return g.GetConfig().GetRestartStrategy().GetExponentialDelay()
}

// planVariant changes a graph in one way.
type planVariant struct {
	name   string
	change func(g *jobplanev1.JobGraph)
}

// otherPlans differ from identityBase in one part of the plan each.
var otherPlans = []planVariant{
	{"a vertex's config value", func(g *jobplanev1.JobGraph) { g.Vertices[0].Config["k"] = "w" }},
	{"a vertex config entry more", func(g *jobplanev1.JobGraph) { g.Vertices[1].Config = map[string]string{"x": "y"} }},
	{"the edges in another order", func(g *jobplanev1.JobGraph) { g.Edges[0], g.Edges[1] = g.Edges[1], g.Edges[0] }},
	{"the vertices in another order", func(g *jobplanev1.JobGraph) { g.Vertices[0], g.Vertices[1] = g.Vertices[1], g.Vertices[0] }},
	{"another parallelism override", func(g *jobplanev1.JobGraph) { g.Config.ParallelismOverrides["a"] = 3 }},
	{"the override written into the vertex", func(g *jobplanev1.JobGraph) { g.Vertices[0].Parallelism = 2 }},
	{"another restart attempts", func(g *jobplanev1.JobGraph) { exponential(g).Attempts = 6 }},
	{"a sub-second client heartbeat timeout", func(g *jobplanev1.JobGraph) {
		g.Config.ClientHeartbeatTimeout = durationpb.New(500 * time.Millisecond)
	}},
	{"a sub-second restart delay", func(g *jobplanev1.JobGraph) { exponential(g).InitialDelay = durationpb.New(1500 * time.Millisecond) }},
	{"an edge's result type", func(g *jobplanev1.JobGraph) {
		g.Edges[1].ResultType = jobplanev1.ResultPartitionType_RESULT_PARTITION_TYPE_BLOCKING
	}},
	{"a vertex's name", func(g *jobplanev1.JobGraph) { g.Vertices[1].Name = "the b" }},
}

// samePlans write identityBase otherwise, with values the contract gives
// the same meaning (JobGraph: plan identity).
var samePlans = []planVariant{
	{"a vertex name equal to its id", func(g *jobplanev1.JobGraph) { g.Vertices[0].Name = "a" }},
	{"an override naming no vertex", func(g *jobplanev1.JobGraph) { g.Config.ParallelismOverrides["ghost"] = 3 }},
	{"the multiplier 2 written out", func(g *jobplanev1.JobGraph) { exponential(g).Multiplier = 2 }},
	{"a zero timeout written out", func(g *jobplanev1.JobGraph) { g.Config.ClientHeartbeatTimeout = durationpb.New(0) }},
	{"scheduling mode PIPELINED_REGION", func(g *jobplanev1.JobGraph) {
		g.Config.SchedulingMode = jobplanev1.SchedulingMode_SCHEDULING_MODE_PIPELINED_REGION
	}},
	{"a jitter of negative zero", func(g *jobplanev1.JobGraph) { exponential(g).Jitter = math.Copysign(0, -1) }},
	{"a zero reset_after written out", func(g *jobplanev1.JobGraph) { exponential(g).ResetAfter = durationpb.New(0) }},
}

// planIdentity submits identityBase as a running job and as a finished
// one, then each variant under both ids: a plan that differs in any part
// is ALREADY_EXISTS, one written otherwise with the same meaning is the
// same plan (created=false), while the job runs and after it ended.
func planIdentity(t *T) {
	running, finished := t.job("running"), t.job("finished")
	t.setup(func() {
		t.mustSubmit(running, identityBase(running))
		t.mustSubmit(finished, identityBase(finished))
		t.env.open(finished)
		t.endsCleanly(finished, jobplanev1.JobStatus_JOB_STATUS_FINISHED, "the base job")
	})
	for _, id := range []string{running, finished} {
		state := map[string]string{running: "while the job runs", finished: "after the job ended"}[id]
		for _, v := range otherPlans {
			g := proto.CloneOf(identityBase(id))
			v.change(g)
			_, err := t.submit(id, g)
			info, _ := errorDetail[*errdetails.ErrorInfo](err)
			terminated := fmt.Sprint(id == finished)
			switch {
			case connect.CodeOf(err) != connect.CodeAlreadyExists || reason(err) != "JOB_ALREADY_EXISTS":
				t.Errorf("%s, the plan with %s answered %v; expected ALREADY_EXISTS (JOB_ALREADY_EXISTS): it is another plan (JobGraph: plan identity)", state, v.name, err)
			case info.GetMetadata()["globally_terminated"] != terminated:
				t.Errorf("%s, JOB_ALREADY_EXISTS for the plan with %s has globally_terminated=%q; expected %q", state, v.name, info.GetMetadata()["globally_terminated"], terminated)
			}
		}
		for _, v := range samePlans {
			g := proto.CloneOf(identityBase(id))
			v.change(g)
			resp, err := t.submit(id, g)
			if err != nil || resp.GetCreated() {
				t.Errorf("%s, the plan with %s answered created=%v, %v; expected created=false: it is the same plan (JobGraph: plan identity)", state, v.name, resp.GetCreated(), err)
			}
		}
	}
	t.env.open(running)
	t.endsCleanly(running, jobplanev1.JobStatus_JOB_STATUS_FINISHED, "the running job")
	t.deployedOnce(running, 4)
}

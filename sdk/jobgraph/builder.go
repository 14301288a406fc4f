package jobgraph

import (
	"math"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
)

// MaxJobIDLength is the longest job id the contract allows.
const MaxJobIDLength = 64

// JobIDRule is what a job id must be, in the words of a violation.
const JobIDRule = "want 1 to 64 characters from [A-Za-z0-9_-]"

// ValidJobID reports whether id is a well-formed job id: 1 to 64
// characters from [A-Za-z0-9_-].
func ValidJobID(id string) bool {
	if len(id) == 0 || len(id) > MaxJobIDLength {
		return false
	}
	for _, c := range []byte(id) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// Builder builds a JobGraph:
//
//	b := jobgraph.NewBuilder("etl")
//	extract := b.Vertex("extract", "noop").Parallelism(4)
//	load := b.Vertex("load", "sleep").Config("duration", "1s")
//	b.Connect(extract, load).Blocking()
//	g, err := b.Build()
//
// Build checks the graph with the server's own rules (Prepare) and
// returns an *Error listing every violation, so an invalid graph is
// found before it is sent. A Builder is not safe for concurrent use.
type Builder struct {
	g *jobplanev1.JobGraph
}

// NewBuilder starts a JobGraph named name.
func NewBuilder(name string) *Builder {
	return &Builder{g: &jobplanev1.JobGraph{Name: name}}
}

// Vertex adds a vertex with an id (unique in the job; letters, digits,
// '_', '-' and '.') that runs the invokable registered under that name
// on the TaskExecutors, with parallelism 1 until set.
func (b *Builder) Vertex(id, invokable string) *VertexBuilder {
	v := &jobplanev1.JobVertex{Id: id, Invokable: invokable, Parallelism: 1}
	b.g.Vertices = append(b.g.Vertices, v)
	return &VertexBuilder{v: v}
}

// Connect adds an edge from source to target: ALL_TO_ALL and PIPELINED
// until set otherwise.
func (b *Builder) Connect(source, target *VertexBuilder) *EdgeBuilder {
	e := &jobplanev1.JobEdge{
		SourceVertexId: source.v.GetId(),
		TargetVertexId: target.v.GetId(),
		Distribution:   jobplanev1.DistributionPattern_DISTRIBUTION_PATTERN_ALL_TO_ALL,
		ResultType:     jobplanev1.ResultPartitionType_RESULT_PARTITION_TYPE_PIPELINED,
	}
	b.g.Edges = append(b.g.Edges, e)
	return &EdgeBuilder{e: e}
}

func (b *Builder) config() *jobplanev1.JobConfig {
	if b.g.Config == nil {
		b.g.Config = &jobplanev1.JobConfig{}
	}
	return b.g.Config
}

// NoRestart makes a failed task fail the job. This is the default when no
// restart strategy is set.
func (b *Builder) NoRestart() *Builder {
	b.config().RestartStrategy = &jobplanev1.RestartStrategy{Strategy: &jobplanev1.RestartStrategy_None{None: &jobplanev1.RestartStrategy_NoRestart{}}}
	return b
}

// FixedDelayRestart restarts after a failure, up to attempts times, each
// after delay. attempts must be at least 1: Build refuses 0, which meant
// unlimited before contract 1.2; UnlimitedRestart restarts without a
// bound, and NoRestart never restarts.
func (b *Builder) FixedDelayRestart(attempts int, delay time.Duration) *Builder {
	b.config().RestartStrategy = &jobplanev1.RestartStrategy{Strategy: &jobplanev1.RestartStrategy_FixedDelay_{FixedDelay: &jobplanev1.RestartStrategy_FixedDelay{
		Attempts: clamp32(attempts), Delay: durationpb.New(delay),
	}}}
	return b
}

// UnlimitedRestart restarts after every failure, without a bound, each
// time after delay: a fixed delay with `unlimited` set. A job that keeps
// failing then runs until it is canceled.
func (b *Builder) UnlimitedRestart(delay time.Duration) *Builder {
	b.config().RestartStrategy = &jobplanev1.RestartStrategy{Strategy: &jobplanev1.RestartStrategy_FixedDelay_{FixedDelay: &jobplanev1.RestartStrategy_FixedDelay{
		Unlimited: true, Delay: durationpb.New(delay),
	}}}
	return b
}

// RestartStrategy sets any restart strategy the contract defines.
func (b *Builder) RestartStrategy(rs *jobplanev1.RestartStrategy) *Builder {
	b.config().RestartStrategy = rs
	return b
}

// ClientHeartbeatTimeout cancels the job when its client sends no
// heartbeat for d (an attached job). Default: none.
func (b *Builder) ClientHeartbeatTimeout(d time.Duration) *Builder {
	b.config().ClientHeartbeatTimeout = durationpb.New(d)
	return b
}

// Checkpoints takes a checkpoint of the job every interval, with the
// contract's defaults for the rest of CheckpointConfig (a 10-minute
// timeout, no pause, one checkpoint kept, any number of failures
// tolerated). A restarted subtask then goes on from its state in the
// latest completed checkpoint. An interval of zero turns checkpoints off
// (the default); a positive one must be at least MinCheckpointInterval.
func (b *Builder) Checkpoints(interval time.Duration) *Builder {
	b.config().Checkpoints = &jobplanev1.CheckpointConfig{Interval: durationpb.New(interval)}
	return b
}

// CheckpointConfig sets any checkpoint configuration the contract
// defines; nil turns checkpoints off.
func (b *Builder) CheckpointConfig(cc *jobplanev1.CheckpointConfig) *Builder {
	b.config().Checkpoints = cc
	return b
}

// RestoreFromSavepoint makes the job's subtasks start from their states
// in the savepoint with this id (from TriggerSavepoint), which must exist
// when the job is submitted. Default: "", a fresh start.
func (b *Builder) RestoreFromSavepoint(savepointID string) *Builder {
	b.config().RestoreFromSavepoint = savepointID
	return b
}

// Build returns the JobGraph, or an *Error listing every rule it breaks
// (the server's rules; the bounds a cluster configures, such as its
// largest job, are left to the cluster). The Builder may be changed and
// built again; the graphs it returned are not changed.
func (b *Builder) Build() (*jobplanev1.JobGraph, error) {
	if _, err := Prepare(b.g, nil, Limits{MaxVertices: math.MaxInt, MaxSubtasks: math.MaxInt, MaxEncodedBytes: math.MaxInt}); err != nil {
		return nil, err
	}
	return proto.CloneOf(b.g), nil
}

// VertexBuilder sets a vertex's fields.
type VertexBuilder struct {
	v *jobplanev1.JobVertex
}

// ID returns the vertex's id.
func (vb *VertexBuilder) ID() string { return vb.v.GetId() }

// Name sets the vertex's name, for people. Default: its id.
func (vb *VertexBuilder) Name(name string) *VertexBuilder {
	vb.v.Name = name
	return vb
}

// Parallelism sets the number of parallel subtasks. Default: 1.
func (vb *VertexBuilder) Parallelism(n int) *VertexBuilder {
	vb.v.Parallelism = clamp32(n)
	return vb
}

// MaxParallelism sets the largest parallelism an override may give the
// vertex. Default: the cluster's.
func (vb *VertexBuilder) MaxParallelism(n int) *VertexBuilder {
	vb.v.MaxParallelism = clamp32(n)
	return vb
}

// Config sets one entry of the configuration the vertex's tasks get.
func (vb *VertexBuilder) Config(key, value string) *VertexBuilder {
	if vb.v.Config == nil {
		vb.v.Config = map[string]string{}
	}
	vb.v.Config[key] = value
	return vb
}

// EdgeBuilder sets an edge's fields.
type EdgeBuilder struct {
	e *jobplanev1.JobEdge
}

// Pointwise connects each source subtask to a few target subtasks
// instead of all of them.
func (eb *EdgeBuilder) Pointwise() *EdgeBuilder {
	eb.e.Distribution = jobplanev1.DistributionPattern_DISTRIBUTION_PATTERN_POINTWISE
	return eb
}

// Blocking makes the target wait until the source has finished (a
// batch exchange), so the two run in separate pipelined regions.
func (eb *EdgeBuilder) Blocking() *EdgeBuilder {
	eb.e.ResultType = jobplanev1.ResultPartitionType_RESULT_PARTITION_TYPE_BLOCKING
	return eb
}

func clamp32(n int) int32 {
	return int32(max(min(n, math.MaxInt32), math.MinInt32))
}

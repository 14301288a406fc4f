package jobgraph

import (
	"fmt"
	"math"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
)

// DefaultMaxSubtasks is the default bound on a job's subtasks: room for
// two vertices of 10,000 all-to-all and many times more, while a job of a
// million subtasks, which would deploy for hours and whose every view is
// huge, is refused at submission.
const DefaultMaxSubtasks = 100_000

// Limits bound what a JobGraph may ask for.
type Limits struct {
	// MaxVertices bounds the number of vertices. Default: 10,000.
	MaxVertices int
	// MaxSubtasks bounds the sum of parallelisms. Default:
	// DefaultMaxSubtasks.
	MaxSubtasks int
	// DefaultMaxParallelism is a vertex's max parallelism when it sets
	// none. Default: 32,768.
	DefaultMaxParallelism int32
	// MaxEncodedBytes bounds the encoded graph, which must fit the HA
	// store's plan limit. Default: 1 MiB less 4 KiB for the plan's other
	// fields.
	MaxEncodedBytes int
}

// WithDefaults fills the zero fields of l with the defaults.
func (l Limits) WithDefaults() Limits {
	if l.MaxVertices == 0 {
		l.MaxVertices = 10_000
	}
	if l.MaxSubtasks == 0 {
		l.MaxSubtasks = DefaultMaxSubtasks
	}
	if l.DefaultMaxParallelism == 0 {
		l.DefaultMaxParallelism = 32_768
	}
	if l.MaxEncodedBytes == 0 {
		l.MaxEncodedBytes = 1<<20 - 4<<10
	}
	return l
}

// Violation is one rule a JobGraph breaks.
type Violation struct {
	// Field is the offending field's path in proto names, such as
	// "job_graph.vertices[2].parallelism".
	Field string
	// Description says what is wrong.
	Description string
}

// Error is a JobGraph's list of violations.
type Error struct {
	Violations []Violation
}

func (e *Error) Error() string {
	parts := make([]string, len(e.Violations))
	for i, v := range e.Violations {
		parts[i] = v.Field + ": " + v.Description
	}
	return "jobgraph: invalid: " + strings.Join(parts, "; ")
}

type checker struct{ vs []Violation }

func (c *checker) add(field, format string, args ...any) {
	c.vs = append(c.vs, Violation{Field: field, Description: fmt.Sprintf(format, args...)})
}

const maxNameBytes = 256

// Prepare checks a submitted graph and returns the graph to run: a copy
// with the cluster's parallelism overrides applied first and the job's own
// after them (the job wins; ids of no vertex are ignored). The submitted
// graph is not modified. A graph that breaks any rule yields an *Error
// listing every violation, with paths under "job_graph".
func Prepare(g *jobplanev1.JobGraph, clusterOverrides map[string]int32, limits Limits) (*jobplanev1.JobGraph, error) {
	limits = limits.WithDefaults()
	var c checker
	if g == nil {
		c.add("job_graph", "required")
		return nil, &Error{c.vs}
	}
	if len(g.GetName()) > maxNameBytes {
		c.add("job_graph.name", "longer than %d bytes", maxNameBytes)
	}
	if size := proto.Size(g); size > limits.MaxEncodedBytes {
		c.add("job_graph", "encoded graph is %d bytes, over the limit of %d", size, limits.MaxEncodedBytes)
	}
	vertices := g.GetVertices()
	switch {
	case len(vertices) == 0:
		c.add("job_graph.vertices", "at least one vertex is required")
	case len(vertices) > limits.MaxVertices:
		c.add("job_graph.vertices", "%d vertices, over the limit of %d", len(vertices), limits.MaxVertices)
	}
	for id, p := range g.GetConfig().GetParallelismOverrides() {
		if p < 1 {
			c.add(fmt.Sprintf("job_graph.config.parallelism_overrides[%q]", id), "parallelism %d: must be at least 1", p)
		}
	}
	for id, p := range clusterOverrides {
		if p < 1 {
			c.add("cluster.parallelism_overrides", "vertex %q: parallelism %d must be at least 1", id, p)
		}
	}

	out := proto.CloneOf(g)
	index := make(map[string]int, len(vertices))
	subtasks := 0
	for i, v := range out.GetVertices() {
		path := fmt.Sprintf("job_graph.vertices[%d]", i)
		switch {
		case !validVertexID(v.GetId()):
			c.add(path+".id", "vertex id %q: want 1 to 128 characters from [A-Za-z0-9._-]", v.GetId())
		default:
			if j, dup := index[v.GetId()]; dup {
				c.add(path+".id", "duplicate vertex id %q (also vertices[%d])", v.GetId(), j)
			} else {
				index[v.GetId()] = i
			}
		}
		if len(v.GetName()) > maxNameBytes {
			c.add(path+".name", "longer than %d bytes", maxNameBytes)
		}
		if v.GetInvokable() == "" {
			c.add(path+".invokable", "required")
		}
		maxP := v.GetMaxParallelism()
		if maxP < 0 {
			c.add(path+".max_parallelism", "must not be negative")
		}
		if maxP <= 0 {
			maxP = limits.DefaultMaxParallelism
		}
		p := v.GetParallelism()
		if o, ok := clusterOverrides[v.GetId()]; ok && o >= 1 {
			p = o
		}
		if o, ok := g.GetConfig().GetParallelismOverrides()[v.GetId()]; ok && o >= 1 {
			p = o
		}
		v.Parallelism = p
		switch {
		case p < 1:
			c.add(path+".parallelism", "parallelism %d: must be at least 1", p)
		case p > maxP:
			c.add(path+".parallelism", "parallelism %d: over the max parallelism %d", p, maxP)
		default:
			subtasks += int(p)
		}
	}
	if subtasks > limits.MaxSubtasks {
		c.add("job_graph.vertices", "%d subtasks in all, over the limit of %d", subtasks, limits.MaxSubtasks)
	}
	edgesOK := true
	for i, e := range g.GetEdges() {
		path := fmt.Sprintf("job_graph.edges[%d]", i)
		_, src := index[e.GetSourceVertexId()]
		_, dst := index[e.GetTargetVertexId()]
		if !src {
			c.add(path+".source_vertex_id", "unknown vertex %q", e.GetSourceVertexId())
		}
		if !dst {
			c.add(path+".target_vertex_id", "unknown vertex %q", e.GetTargetVertexId())
		}
		if src && dst && e.GetSourceVertexId() == e.GetTargetVertexId() {
			c.add(path, "an edge may not join vertex %q to itself", e.GetSourceVertexId())
		}
		edgesOK = edgesOK && src && dst
		if e.GetDistribution() == jobplanev1.DistributionPattern_DISTRIBUTION_PATTERN_UNSPECIFIED {
			c.add(path+".distribution", "required")
		}
		if e.GetResultType() == jobplanev1.ResultPartitionType_RESULT_PARTITION_TYPE_UNSPECIFIED {
			c.add(path+".result_type", "required")
		}
	}
	if edgesOK && len(index) == len(vertices) {
		if cycle := findCycle(out, index); cycle != "" {
			c.add("job_graph.edges", "the edges form a cycle through vertex %q", cycle)
		}
	}
	checkRestart(&c, g.GetConfig().GetRestartStrategy())
	if d := g.GetConfig().GetClientHeartbeatTimeout(); d != nil && (d.CheckValid() != nil || d.AsDuration() < 0) {
		c.add("job_graph.config.client_heartbeat_timeout", "must be a valid, non-negative duration")
	}
	checkCheckpoints(&c, g.GetConfig().GetCheckpoints())
	if len(c.vs) > 0 {
		return nil, &Error{c.vs}
	}
	return out, nil
}

// MinCheckpointInterval is the shortest checkpoint interval a JobGraph
// may ask for.
const MinCheckpointInterval = 10 * time.Millisecond

// MaxRetainedCheckpoints is the most completed checkpoints a job may keep.
const MaxRetainedCheckpoints = 100

func checkCheckpoints(c *checker, cp *jobplanev1.CheckpointConfig) {
	const path = "job_graph.config.checkpoints"
	for field, d := range map[string]*durationpb.Duration{"interval": cp.GetInterval(), "timeout": cp.GetTimeout(), "min_pause": cp.GetMinPause()} {
		if d != nil && (d.CheckValid() != nil || d.AsDuration() < 0) {
			c.add(path+"."+field, "must be a valid, non-negative duration")
		}
	}
	if d := cp.GetInterval(); d != nil && d.CheckValid() == nil && d.AsDuration() > 0 && d.AsDuration() < MinCheckpointInterval {
		c.add(path+".interval", "must be at least %v (or unset: no checkpoints)", MinCheckpointInterval)
	}
	if r := cp.GetRetained(); r < 0 || r > MaxRetainedCheckpoints {
		c.add(path+".retained", "must be from 0 (meaning 1) to %d", MaxRetainedCheckpoints)
	}
	if cp.GetTolerableFailures() < 0 {
		c.add(path+".tolerable_failures", "must not be negative (unset tolerates any number)")
	}
}

func validVertexID(id string) bool {
	if len(id) == 0 || len(id) > 128 {
		return false
	}
	for _, r := range []byte(id) {
		if !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '.' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

// findCycle returns a vertex on a cycle of the graph's edges, or "" if
// there is none (Kahn's algorithm).
func findCycle(g *jobplanev1.JobGraph, index map[string]int) string {
	n := len(g.GetVertices())
	indeg := make([]int, n)
	out := make([][]int, n)
	for _, e := range g.GetEdges() {
		s, t := index[e.GetSourceVertexId()], index[e.GetTargetVertexId()]
		out[s] = append(out[s], t)
		indeg[t]++
	}
	queue := make([]int, 0, n)
	for i, d := range indeg {
		if d == 0 {
			queue = append(queue, i)
		}
	}
	seen := 0
	for len(queue) > 0 {
		v := queue[0]
		queue = queue[1:]
		seen++
		for _, t := range out[v] {
			if indeg[t]--; indeg[t] == 0 {
				queue = append(queue, t)
			}
		}
	}
	if seen == n {
		return ""
	}
	for i, d := range indeg {
		if d > 0 {
			return g.GetVertices()[i].GetId()
		}
	}
	return ""
}

func checkRestart(c *checker, rs *jobplanev1.RestartStrategy) {
	const path = "job_graph.config.restart_strategy"
	// Every Duration must be valid (seconds and nanos of one sign, |nanos|
	// under a second), so that one length has one encoding and plans that
	// mean the same have one digest.
	valid := func(field string, d *durationpb.Duration) {
		if d != nil && d.CheckValid() != nil {
			c.add(path+"."+field, "must be a valid duration: seconds and nanos of one sign, nanos under a second")
		}
	}
	switch s := rs.GetStrategy().(type) {
	case *jobplanev1.RestartStrategy_FixedDelay_:
		valid("fixed_delay.delay", s.FixedDelay.GetDelay())
	case *jobplanev1.RestartStrategy_ExponentialDelay_:
		e := s.ExponentialDelay
		valid("exponential_delay.initial_delay", e.GetInitialDelay())
		valid("exponential_delay.max_delay", e.GetMaxDelay())
		valid("exponential_delay.reset_after", e.GetResetAfter())
	case *jobplanev1.RestartStrategy_FailureRate_:
		valid("failure_rate.interval", s.FailureRate.GetInterval())
		valid("failure_rate.delay", s.FailureRate.GetDelay())
	}
	switch s := rs.GetStrategy().(type) {
	case *jobplanev1.RestartStrategy_FixedDelay_:
		checkAttempts(c, path+".fixed_delay", s.FixedDelay.GetAttempts(), s.FixedDelay.GetUnlimited())
		if s.FixedDelay.GetDelay().AsDuration() < 0 {
			c.add(path+".fixed_delay.delay", "must not be negative")
		}
	case *jobplanev1.RestartStrategy_ExponentialDelay_:
		e := s.ExponentialDelay
		if e.GetInitialDelay().AsDuration() <= 0 {
			c.add(path+".exponential_delay.initial_delay", "must be positive")
		}
		if e.GetMaxDelay().AsDuration() < e.GetInitialDelay().AsDuration() {
			c.add(path+".exponential_delay.max_delay", "must be at least initial_delay")
		}
		// NaN fails every comparison, so each bound is checked as what
		// must hold, not as what must not.
		if m := e.GetMultiplier(); m != 0 && !(m >= 1 && m <= math.MaxFloat64) {
			c.add(path+".exponential_delay.multiplier", "must be a finite number of at least 1")
		}
		if j := e.GetJitter(); !(j >= 0 && j <= 1) {
			c.add(path+".exponential_delay.jitter", "must be in [0, 1]")
		}
		checkAttempts(c, path+".exponential_delay", e.GetAttempts(), e.GetUnlimited())
	case *jobplanev1.RestartStrategy_FailureRate_:
		f := s.FailureRate
		if f.GetMaxFailures() < 1 {
			c.add(path+".failure_rate.max_failures", "must be at least 1")
		}
		if f.GetInterval().AsDuration() <= 0 {
			c.add(path+".failure_rate.interval", "must be positive")
		}
		if f.GetDelay().AsDuration() < 0 {
			c.add(path+".failure_rate.delay", "must not be negative")
		}
	}
}

// checkAttempts checks the bound of a fixed or exponential delay (path
// names the strategy): at least one restart, or unlimited, not both.
// Before contract 1.2, attempts 0 meant unlimited; it is refused rather
// than given another meaning, so that a client written for 1.1 learns
// that it must say unlimited.
func checkAttempts(c *checker, path string, attempts int32, unlimited bool) {
	switch {
	case attempts < 0:
		c.add(path+".attempts", "must not be negative: set a count of at least 1, or unlimited: true")
	case attempts == 0 && !unlimited:
		c.add(path+".attempts", "0 no longer means unlimited (since contract 1.2): set unlimited: true to restart without a bound, "+
			"a count of at least 1, or use the none strategy for no restarts")
	case attempts > 0 && unlimited:
		c.add(path+".unlimited", "unlimited is set together with attempts %d: set one or the other", attempts)
	}
}

// Subtasks returns the number of subtasks of a prepared graph.
func Subtasks(g *jobplanev1.JobGraph) int {
	n := 0
	for _, v := range g.GetVertices() {
		n += int(v.GetParallelism())
	}
	return n
}

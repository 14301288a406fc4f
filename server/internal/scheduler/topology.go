package scheduler

import (
	"fmt"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
)

// Topology is the execution topology of a JobGraph: its execution
// vertices (subtasks) numbered 0..N-1 vertex after vertex, grouped into
// pipelined regions.
type Topology struct {
	vertices []vertexInfo
	edges    []edgeInfo
	// region[e] is the region of execution vertex e.
	region []int32
	// regions[r] lists the execution vertices of region r, ascending.
	regions [][]int32
	// groups are the blocking results, one per blocking edge, each a
	// group of producer regions and consumer regions.
	groups []group
	// produces[r] and consumes[r] list the groups region r produces into
	// and consumes from.
	produces, consumes [][]int32
}

type vertexInfo struct {
	id          string
	parallelism int32
	offset      int32 // execution vertex of subtask 0
}

type edgeInfo struct {
	src, dst int // vertex indexes
	allToAll bool
	blocking bool
}

// group is a blocking result as the regions see it: which regions produce
// into it, and which consume from it.
type group struct {
	producers, consumers []int32
}

// Build computes the topology of g, whose vertices have their final
// parallelism (overrides applied) and whose edges are valid.
func Build(g *jobplanev1.JobGraph) (*Topology, error) {
	t := &Topology{}
	index := make(map[string]int, len(g.GetVertices()))
	var n int64
	for i, v := range g.GetVertices() {
		if v.GetParallelism() < 1 {
			return nil, fmt.Errorf("scheduler: vertex %q has parallelism %d", v.GetId(), v.GetParallelism())
		}
		index[v.GetId()] = i
		t.vertices = append(t.vertices, vertexInfo{id: v.GetId(), parallelism: v.GetParallelism(), offset: int32(n)})
		n += int64(v.GetParallelism())
	}
	if n > 1<<31-1 {
		return nil, fmt.Errorf("scheduler: %d subtasks", n)
	}
	for _, e := range g.GetEdges() {
		src, ok1 := index[e.GetSourceVertexId()]
		dst, ok2 := index[e.GetTargetVertexId()]
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("scheduler: edge %s->%s names an unknown vertex", e.GetSourceVertexId(), e.GetTargetVertexId())
		}
		t.edges = append(t.edges, edgeInfo{
			src: src, dst: dst,
			allToAll: e.GetDistribution() == jobplanev1.DistributionPattern_DISTRIBUTION_PATTERN_ALL_TO_ALL,
			blocking: e.GetResultType() == jobplanev1.ResultPartitionType_RESULT_PARTITION_TYPE_BLOCKING,
		})
	}
	t.buildRegions(int32(n))
	t.buildGroups()
	return t, nil
}

// Subtasks returns the number of execution vertices.
func (t *Topology) Subtasks() int { return len(t.region) }

// Regions returns the number of pipelined regions.
func (t *Topology) Regions() int { return len(t.regions) }

// ExecutionVertex returns the execution vertex of a vertex's subtask.
func (t *Topology) ExecutionVertex(vertex, subtask int) int32 {
	return t.vertices[vertex].offset + int32(subtask)
}

// RegionOf returns the region of an execution vertex.
func (t *Topology) RegionOf(ev int32) int { return int(t.region[ev]) }

// Region returns the execution vertices of region r, ascending. The slice
// must not be modified.
func (t *Topology) Region(r int) []int32 { return t.regions[r] }

// pointwise calls f for every (source subtask, target subtask) pair a
// POINTWISE edge connects, as Flink does: equal parallelisms connect
// one-to-one; otherwise contiguous ranges fan in or out.
func pointwise(p, q int32, f func(i, j int32)) {
	switch {
	case p == q:
		for i := range p {
			f(i, i)
		}
	case p > q:
		// Target j consumes sources [j*p/q, (j+1)*p/q).
		for j := range q {
			for i := int32(int64(j) * int64(p) / int64(q)); i < int32(int64(j+1)*int64(p)/int64(q)); i++ {
				f(i, j)
			}
		}
	default:
		// Source i feeds targets [i*q/p, (i+1)*q/p).
		for i := range p {
			for j := int32(int64(i) * int64(q) / int64(p)); j < int32(int64(i+1)*int64(q)/int64(p)); j++ {
				f(i, j)
			}
		}
	}
}

// buildRegions unions execution vertices joined by pipelined edges.
func (t *Topology) buildRegions(n int32) {
	parent := make([]int32, n)
	for i := range parent {
		parent[i] = int32(i)
	}
	var find func(x int32) int32
	find = func(x int32) int32 {
		for parent[x] != x {
			parent[x] = parent[parent[x]]
			x = parent[x]
		}
		return x
	}
	union := func(a, b int32) {
		ra, rb := find(a), find(b)
		if ra != rb {
			if ra < rb {
				parent[rb] = ra
			} else {
				parent[ra] = rb
			}
		}
	}
	for _, e := range t.edges {
		if e.blocking {
			continue
		}
		s, d := t.vertices[e.src], t.vertices[e.dst]
		if e.allToAll {
			// Every subtask of both vertices lands in one region.
			first := s.offset
			for i := range s.parallelism {
				union(first, s.offset+i)
			}
			for j := range d.parallelism {
				union(first, d.offset+j)
			}
			continue
		}
		pointwise(s.parallelism, d.parallelism, func(i, j int32) { union(s.offset+i, d.offset+j) })
	}
	// Number regions in order of their first execution vertex; ids is
	// indexed by root, which is the smallest member of its set.
	t.region = make([]int32, n)
	ids := make([]int32, n)
	for ev := range n {
		root := find(ev)
		if root == ev {
			ids[ev] = int32(len(t.regions))
			t.regions = append(t.regions, nil)
		}
		r := ids[root]
		t.region[ev] = r
		t.regions[r] = append(t.regions[r], ev)
	}
}

// buildGroups records, for each blocking edge, the regions that produce
// into it and those that consume from it. An ALL_TO_ALL edge is one group
// for all its producers and consumers; a POINTWISE edge is one group per
// consumer region (each consumes from a few producers).
func (t *Topology) buildGroups() {
	t.produces = make([][]int32, len(t.regions))
	t.consumes = make([][]int32, len(t.regions))
	regionsOf := func(v vertexInfo) []int32 {
		var out []int32
		last := int32(-1)
		for i := range v.parallelism {
			r := t.region[v.offset+i]
			if r != last {
				out = append(out, r)
				last = r
			}
		}
		return dedup(out)
	}
	for _, e := range t.edges {
		if !e.blocking {
			continue
		}
		s, d := t.vertices[e.src], t.vertices[e.dst]
		if e.allToAll {
			t.addGroup(group{producers: regionsOf(s), consumers: regionsOf(d)})
			continue
		}
		byConsumer := map[int32][]int32{}
		pointwise(s.parallelism, d.parallelism, func(i, j int32) {
			c := t.region[d.offset+j]
			byConsumer[c] = append(byConsumer[c], t.region[s.offset+i])
		})
		for c, ps := range byConsumer {
			t.addGroup(group{producers: dedup(ps), consumers: []int32{c}})
		}
	}
}

func (t *Topology) addGroup(g group) {
	id := int32(len(t.groups))
	t.groups = append(t.groups, g)
	for _, p := range g.producers {
		t.produces[p] = append(t.produces[p], id)
	}
	for _, c := range g.consumers {
		t.consumes[c] = append(t.consumes[c], id)
	}
}

func dedup(s []int32) []int32 {
	seen := make(map[int32]bool, len(s))
	out := s[:0]
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// Producers returns the regions whose blocking results region r consumes:
// r may start once every one of them has finished.
func (t *Topology) Producers(r int) []int {
	seen := map[int32]bool{}
	var out []int
	for _, g := range t.consumes[r] {
		for _, p := range t.groups[g].producers {
			if !seen[p] {
				seen[p] = true
				out = append(out, int(p))
			}
		}
	}
	return out
}

// RestartSet returns the regions to restart when a task of execution
// vertex ev fails: its region and, transitively, every region that
// consumes a blocking result of a restarted region. Other regions keep
// running.
func (t *Topology) RestartSet(ev int32) []int {
	start := t.region[ev]
	visited := make([]bool, len(t.regions))
	groupSeen := make([]bool, len(t.groups))
	visited[start] = true
	queue := []int32{start}
	out := []int{int(start)}
	for len(queue) > 0 {
		r := queue[0]
		queue = queue[1:]
		for _, g := range t.produces[r] {
			if groupSeen[g] {
				continue
			}
			groupSeen[g] = true
			for _, c := range t.groups[g].consumers {
				if !visited[c] {
					visited[c] = true
					queue = append(queue, c)
					out = append(out, int(c))
				}
			}
		}
	}
	return out
}

package scheduler

import (
	"cmp"
	"fmt"
	"slices"

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

// VertexOf returns the vertex index and subtask index of execution vertex
// ev.
func (t *Topology) VertexOf(ev int32) (vertex, subtask int) {
	i, found := slices.BinarySearchFunc(t.vertices, ev, func(v vertexInfo, ev int32) int { return cmp.Compare(v.offset, ev) })
	if !found {
		i-- // ev lies inside the vertex before
	}
	return i, int(ev - t.vertices[i].offset)
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

// unionFind is a disjoint-set forest over execution vertices; each set's
// root is its smallest member.
type unionFind []int32

func newUnionFind(n int32) unionFind {
	u := make(unionFind, n)
	for i := range u {
		u[i] = int32(i)
	}
	return u
}

func (u unionFind) find(x int32) int32 {
	for u[x] != x {
		u[x] = u[u[x]]
		x = u[x]
	}
	return x
}

func (u unionFind) union(a, b int32) {
	ra, rb := u.find(a), u.find(b)
	switch {
	case ra < rb:
		u[rb] = ra
	case rb < ra:
		u[ra] = rb
	}
}

// buildRegions unions execution vertices joined by pipelined edges, then
// merges regions that depend on each other in a cycle through blocking
// results (a region cannot wait for itself to finish), and records the
// blocking results between the regions that remain.
func (t *Topology) buildRegions(n int32) {
	sets := newUnionFind(n)
	for _, e := range t.edges {
		if e.blocking {
			continue
		}
		s, d := t.vertices[e.src], t.vertices[e.dst]
		if e.allToAll {
			// Every subtask of both vertices lands in one region.
			first := s.offset
			for i := range s.parallelism {
				sets.union(first, s.offset+i)
			}
			for j := range d.parallelism {
				sets.union(first, d.offset+j)
			}
			continue
		}
		pointwise(s.parallelism, d.parallelism, func(i, j int32) { sets.union(s.offset+i, d.offset+j) })
	}
	t.numberRegions(sets)
	t.buildGroups()
	if t.mergeCycles(sets) {
		t.numberRegions(sets)
		t.buildGroups()
	}
	t.splitSelfConsumption()
}

// numberRegions numbers the sets in order of their first execution vertex.
// All regions share one backing array.
func (t *Topology) numberRegions(sets unionFind) {
	n := int32(len(sets))
	t.region = make([]int32, n)
	ids := make([]int32, n) // by root, the smallest member of its set
	var sizes []int32
	for ev := range n {
		root := sets.find(ev)
		if root == ev {
			ids[ev] = int32(len(sizes))
			sizes = append(sizes, 0)
		}
		r := ids[root]
		t.region[ev] = r
		sizes[r]++
	}
	members := make([]int32, 0, n)
	t.regions = make([][]int32, len(sizes))
	for r, size := range sizes {
		t.regions[r] = members[len(members) : len(members) : len(members)+int(size)]
		members = members[:len(members)+int(size)]
	}
	for ev := range n {
		r := t.region[ev]
		t.regions[r] = append(t.regions[r], ev)
	}
}

// mergeCycles finds the strongly connected components of the graph of
// regions and blocking results (region -> result it produces -> region
// consuming it) and unions the regions of every component that has more
// than one region. It reports whether it merged anything. Tarjan's
// algorithm, iterative, linear in regions plus group memberships.
func (t *Topology) mergeCycles(sets unionFind) bool {
	nr := len(t.regions)
	nodes := nr + len(t.groups) // regions first, then groups
	succ := func(v int) []int32 {
		if v < nr {
			return t.produces[v] // group ids, offset below
		}
		return t.groups[v-nr].consumers
	}
	next := func(v int, k int) int {
		if v < nr {
			return nr + int(t.produces[v][k])
		}
		return int(t.groups[v-nr].consumers[k])
	}
	const unvisited = -1
	index := make([]int32, nodes)
	low := make([]int32, nodes)
	onStack := make([]bool, nodes)
	for i := range index {
		index[i] = unvisited
	}
	var stack []int32
	type frame struct{ v, k int }
	var calls []frame
	counter := int32(0)
	merged := false
	for root := range nodes {
		if index[root] != unvisited {
			continue
		}
		calls = append(calls, frame{root, 0})
		index[root], low[root] = counter, counter
		counter++
		stack = append(stack, int32(root))
		onStack[root] = true
		for len(calls) > 0 {
			f := &calls[len(calls)-1]
			if f.k < len(succ(f.v)) {
				w := next(f.v, f.k)
				f.k++
				switch {
				case index[w] == unvisited:
					index[w], low[w] = counter, counter
					counter++
					stack = append(stack, int32(w))
					onStack[w] = true
					calls = append(calls, frame{w, 0})
				case onStack[w]:
					low[f.v] = min(low[f.v], index[w])
				}
				continue
			}
			v := f.v
			calls = calls[:len(calls)-1]
			if len(calls) > 0 {
				p := calls[len(calls)-1].v
				low[p] = min(low[p], low[v])
			}
			if low[v] != index[v] {
				continue
			}
			// v roots a component: pop it, union its regions.
			first := int32(-1)
			for {
				w := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				onStack[w] = false
				if int(w) < nr {
					ev := t.regions[w][0]
					if first < 0 {
						first = ev
					} else {
						sets.union(first, ev)
						merged = true
					}
				}
				if int(w) == v {
					break
				}
			}
		}
	}
	return merged
}

// splitSelfConsumption handles a region that both produces into and
// consumes from one blocking result (an edge inside the region, after
// cycles were merged): the region waits only for the result's other
// producers, while the result's other consumers wait for all of them.
func (t *Topology) splitSelfConsumption() {
	producing := make([]bool, len(t.regions))
	for g := range t.groups {
		grp := t.groups[g]
		for _, p := range grp.producers {
			producing[p] = true
		}
		self := int32(-1)
		for _, c := range grp.consumers {
			if producing[c] {
				self = c // at most one after merging cycles
				break
			}
		}
		for _, p := range grp.producers {
			producing[p] = false
		}
		if self < 0 {
			continue
		}
		notSelf := func(r int32) bool { return r == self }
		t.groups[g].consumers = slices.DeleteFunc(slices.Clone(grp.consumers), notSelf)
		t.consumes[self] = slices.DeleteFunc(t.consumes[self], func(x int32) bool { return x == int32(g) })
		if external := slices.DeleteFunc(slices.Clone(grp.producers), notSelf); len(external) > 0 {
			t.addGroup(group{producers: external, consumers: []int32{self}})
		}
	}
}

// buildGroups records, for each blocking edge, the regions that produce
// into it and those that consume from it. An ALL_TO_ALL edge is one group
// for all its producers and consumers; a POINTWISE edge is one group per
// consumer region (each consumes from a few producers).
func (t *Topology) buildGroups() {
	t.groups = t.groups[:0]
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

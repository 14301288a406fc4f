package scheduler

import (
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
)

// Execution states, shortened.
const (
	created  = jobplanev1.ExecutionState_EXECUTION_STATE_CREATED
	finished = jobplanev1.ExecutionState_EXECUTION_STATE_FINISHED
)

// ExecutionGraph is the scheduling state of a job: its topology, the
// current attempt number and state of every execution vertex, and which
// regions are released for deployment.
//
// Under pipelined-region scheduling a region is released once every
// region whose blocking results it consumes has finished; under eager
// scheduling every region is released at once. All bookkeeping is
// incremental: a state change costs O(1), a region finishing costs the
// size of the results it produces, and nothing is proportional to the
// number of edges between subtasks.
type ExecutionGraph struct {
	*Topology
	eager bool

	attempt []int32
	state   []jobplanev1.ExecutionState

	unfinished []int32 // per region: execution vertices not FINISHED
	waiting    []int32 // per region: consumed results with unfinished producers
	released   []bool  // per region: its vertices may be deployed
	pending    []int32 // per group: producer regions not finished

	demand   int // unfinished execution vertices of released regions
	finished int // FINISHED execution vertices
	// counts counts the execution vertices in each state, by the state's
	// number, so that a job's summary costs no walk of its subtasks.
	counts []int32
}

// NewExecutionGraph builds the execution graph of g (final parallelism,
// valid edges), every execution vertex CREATED at attempt 0. Release
// returns the regions to deploy first.
func NewExecutionGraph(g *jobplanev1.JobGraph, eager bool) (*ExecutionGraph, error) {
	t, err := Build(g)
	if err != nil {
		return nil, err
	}
	n, nr := t.Subtasks(), t.Regions()
	x := &ExecutionGraph{
		Topology:   t,
		eager:      eager,
		attempt:    make([]int32, n),
		state:      make([]jobplanev1.ExecutionState, n),
		unfinished: make([]int32, nr),
		waiting:    make([]int32, nr),
		released:   make([]bool, nr),
		pending:    make([]int32, len(t.groups)),
		counts:     make([]int32, len(jobplanev1.ExecutionState_name)),
	}
	for ev := range x.state {
		x.state[ev] = created
	}
	x.counts[created] = int32(n)
	for r, evs := range t.regions {
		x.unfinished[r] = int32(len(evs))
		x.waiting[r] = int32(len(t.consumes[r]))
	}
	for g, grp := range t.groups {
		x.pending[g] = int32(len(grp.producers))
	}
	return x, nil
}

// Release releases the regions that may be deployed now and have not
// been yet: at the start, the regions that consume no blocking result (or
// every region, under eager scheduling).
func (x *ExecutionGraph) Release() []int {
	var out []int
	for r := range x.regions {
		if !x.released[r] && (x.eager || x.waiting[r] == 0) {
			x.release(r)
			out = append(out, r)
		}
	}
	return out
}

func (x *ExecutionGraph) release(r int) {
	x.released[r] = true
	x.demand += int(x.unfinished[r])
}

// Attempt returns the current attempt number of execution vertex ev.
func (x *ExecutionGraph) Attempt(ev int32) int { return int(x.attempt[ev]) }

// SetAttempt sets ev's attempt number: that of an attempt a new
// JobMaster adopted, which runs under its number; a restart of ev
// continues from it.
func (x *ExecutionGraph) SetAttempt(ev int32, n int) { x.attempt[ev] = int32(n) }

// State returns the state of execution vertex ev's current attempt.
func (x *ExecutionGraph) State(ev int32) jobplanev1.ExecutionState { return x.state[ev] }

// Released reports whether region r may be deployed.
func (x *ExecutionGraph) Released(r int) bool { return x.released[r] }

// Demand returns the number of slots the job can use now: one per
// execution vertex of a released region that has not finished.
func (x *ExecutionGraph) Demand() int { return x.demand }

// Count returns the number of execution vertices in state s, in O(1).
func (x *ExecutionGraph) Count(s jobplanev1.ExecutionState) int {
	if int(s) < 0 || int(s) >= len(x.counts) {
		return 0
	}
	return int(x.counts[s])
}

// Finished reports whether every execution vertex has finished.
func (x *ExecutionGraph) Finished() bool { return x.finished == len(x.state) }

// SetState records a new state for ev's current attempt. When this
// finishes ev's region, the regions that were waiting only for it are
// released and returned.
func (x *ExecutionGraph) SetState(ev int32, s jobplanev1.ExecutionState) []int {
	old := x.state[ev]
	if old == s {
		return nil
	}
	x.state[ev] = s
	x.counts[old]--
	x.counts[s]++
	r := x.region[ev]
	switch {
	case s == finished:
		x.finished++
		x.unfinished[r]--
		if x.released[r] {
			x.demand--
		}
		if x.unfinished[r] == 0 {
			return x.regionFinished(r)
		}
	case old == finished:
		x.unfinish(r)
		x.finished--
	}
	return nil
}

// regionFinished counts region r's results as produced and releases the
// regions that now have all their inputs.
func (x *ExecutionGraph) regionFinished(r int32) []int {
	var out []int
	for _, g := range x.produces[r] {
		x.pending[g]--
		if x.pending[g] != 0 {
			continue
		}
		for _, c := range x.groups[g].consumers {
			x.waiting[c]--
			if x.waiting[c] == 0 && !x.released[c] && !x.eager {
				x.release(int(c))
				out = append(out, int(c))
			}
		}
	}
	return out
}

// unfinish takes back one finished execution vertex of region r: if r
// had finished, its results are unproduced again.
func (x *ExecutionGraph) unfinish(r int32) {
	x.unfinished[r]++
	if x.released[r] {
		x.demand++
	}
	if x.unfinished[r] != 1 {
		return
	}
	for _, g := range x.produces[r] {
		x.pending[g]++
		if x.pending[g] != 1 {
			continue
		}
		for _, c := range x.groups[g].consumers {
			x.waiting[c]++
		}
	}
}

// Restart resets the given regions (a union of restart sets, so it holds
// every consumer of their blocking results): every execution vertex that
// had left CREATED gets a new attempt, and all are CREATED again. Regions
// not listed keep their attempts. The reset regions that may run now are
// released and returned; the others wait for their producers again.
func (x *ExecutionGraph) Restart(regions []int) []int {
	for _, r := range regions {
		if x.released[r] {
			x.released[r] = false
			x.demand -= int(x.unfinished[r])
		}
	}
	for _, r := range regions {
		for _, ev := range x.regions[r] {
			switch x.state[ev] {
			case created:
				continue
			case finished:
				x.finished--
				x.unfinish(int32(r))
			}
			x.counts[x.state[ev]]--
			x.counts[created]++
			x.state[ev] = created
			x.attempt[ev]++
		}
	}
	var out []int
	for _, r := range regions {
		if x.eager || x.waiting[r] == 0 {
			x.release(r)
			out = append(out, r)
		}
	}
	return out
}

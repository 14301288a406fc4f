package scheduler_test

import (
	"fmt"
	"slices"
	"testing"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/server/internal/scheduler"
)

const (
	running  = jobplanev1.ExecutionState_EXECUTION_STATE_RUNNING
	finished = jobplanev1.ExecutionState_EXECUTION_STATE_FINISHED
	failed   = jobplanev1.ExecutionState_EXECUTION_STATE_FAILED
	created  = jobplanev1.ExecutionState_EXECUTION_STATE_CREATED
)

func newGraph(t testing.TB, eager bool, vs []*jobplanev1.JobVertex, es ...*jobplanev1.JobEdge) *scheduler.ExecutionGraph {
	t.Helper()
	x, err := scheduler.NewExecutionGraph(&jobplanev1.JobGraph{Vertices: vs, Edges: es}, eager)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// finish runs every execution vertex of region r to FINISHED and returns
// the regions that got released.
func finish(x *scheduler.ExecutionGraph, r int) []int {
	var out []int
	for _, ev := range x.Region(r) {
		x.SetState(ev, running)
		out = append(out, x.SetState(ev, finished)...)
	}
	return out
}

func TestBlockingEdgeReleasesConsumersLast(t *testing.T) {
	t.Parallel()
	// src =pipelined, all-to-all=> mid =blocking, all-to-all=> sink
	x := newGraph(t, false, []*jobplanev1.JobVertex{vertex("src", 4), vertex("mid", 4), vertex("sink", 4)},
		edge("src", "mid", true, false), edge("mid", "sink", true, true))
	first := x.Release()
	if len(first) != 1 || len(x.Region(first[0])) != 8 {
		t.Fatalf("initial release = %v, want the one region of src and mid (8 subtasks)", first)
	}
	if x.Demand() != 8 {
		t.Errorf("demand = %d, want 8", x.Demand())
	}
	// Finishing all but one producer releases nothing.
	evs := x.Region(first[0])
	for _, ev := range evs[:7] {
		if got := x.SetState(ev, finished); len(got) != 0 {
			t.Fatalf("released %v before every producer finished", got)
		}
	}
	got := x.SetState(evs[7], finished)
	if len(got) != 4 {
		t.Fatalf("released %v after the producers finished, want the 4 sink regions", got)
	}
	if x.Demand() != 4 {
		t.Errorf("demand = %d, want 4 (the sinks)", x.Demand())
	}
	for _, r := range got {
		finish(x, r)
	}
	if !x.Finished() || x.Demand() != 0 {
		t.Errorf("finished = %v, demand = %d; want true, 0", x.Finished(), x.Demand())
	}
}

func TestEagerReleasesEverything(t *testing.T) {
	t.Parallel()
	x := newGraph(t, true, []*jobplanev1.JobVertex{vertex("a", 2), vertex("b", 2)}, edge("a", "b", true, true))
	if got := x.Release(); len(got) != 4 || x.Demand() != 4 {
		t.Errorf("eager release = %v with demand %d, want all 4 regions, 4", got, x.Demand())
	}
}

func TestRestartKeepsOtherAttempts(t *testing.T) {
	t.Parallel()
	// src =pointwise, pipelined=> map =pointwise, blocking=> sink, p=2:
	// regions {src0,map0}, {src1,map1}, {sink0}, {sink1}.
	x := newGraph(t, false, []*jobplanev1.JobVertex{vertex("src", 2), vertex("map", 2), vertex("sink", 2)},
		edge("src", "map", false, false), edge("map", "sink", false, true))
	if x.Regions() != 4 {
		t.Fatalf("regions = %d, want 4", x.Regions())
	}
	rel := x.Release()
	if len(rel) != 2 {
		t.Fatalf("initial release = %v, want the two source regions", rel)
	}
	r0, r1 := x.RegionOf(x.ExecutionVertex(0, 0)), x.RegionOf(x.ExecutionVertex(0, 1))
	sink0, sink1 := x.RegionOf(x.ExecutionVertex(2, 0)), x.RegionOf(x.ExecutionVertex(2, 1))
	if got := finish(x, r0); !slices.Equal(got, []int{sink0}) {
		t.Fatalf("finishing region 0 released %v, want [%d]", got, sink0)
	}
	finish(x, sink0)
	// map1 fails: its region and sink1 restart; region 0 and sink0 stay.
	map1 := x.ExecutionVertex(1, 1)
	x.SetState(x.ExecutionVertex(0, 1), running)
	x.SetState(map1, failed)
	set := x.RestartSet(map1)
	slices.Sort(set)
	if want := []int{r1, sink1}; !slices.Equal(set, want) {
		t.Fatalf("restart set = %v, want %v", set, want)
	}
	if got := x.Restart(set); !slices.Equal(got, []int{r1}) {
		t.Fatalf("restart released %v, want [%d] (sink1 waits for map1 again)", got, r1)
	}
	for _, c := range []struct {
		vertex, subtask, attempt int
	}{{0, 0, 0}, {1, 0, 0}, {2, 0, 0}, {0, 1, 1}, {1, 1, 1}, {2, 1, 0}} {
		if got := x.Attempt(x.ExecutionVertex(c.vertex, c.subtask)); got != c.attempt {
			t.Errorf("vertex %d subtask %d: attempt %d, want %d", c.vertex, c.subtask, got, c.attempt)
		}
	}
	if got := finish(x, r1); !slices.Equal(got, []int{sink1}) {
		t.Fatalf("finishing the restarted region released %v, want [%d]", got, sink1)
	}
	finish(x, sink1)
	if !x.Finished() {
		t.Error("not finished after every region finished")
	}
}

func TestRestartTakesBackFinishedConsumers(t *testing.T) {
	t.Parallel()
	// Eager: the consumer runs and finishes before its producer fails; the
	// producer's restart restarts the consumer too.
	x := newGraph(t, true, []*jobplanev1.JobVertex{vertex("a", 1), vertex("b", 1)}, edge("a", "b", false, true))
	x.Release()
	a, b := x.ExecutionVertex(0, 0), x.ExecutionVertex(1, 0)
	x.SetState(b, finished)
	x.SetState(a, failed)
	x.Restart(x.RestartSet(a))
	if x.Attempt(a) != 1 || x.Attempt(b) != 1 || x.State(b) != created || x.Finished() {
		t.Errorf("after restart: a attempt %d, b attempt %d state %v; want 1, 1, CREATED", x.Attempt(a), x.Attempt(b), x.State(b))
	}
	if x.Demand() != 2 {
		t.Errorf("demand = %d, want 2", x.Demand())
	}
}

func TestCyclesThroughBlockingResultsMerge(t *testing.T) {
	t.Parallel()
	// a -pipelined-> d puts a and d in one region; a -blocking-> c
	// -blocking-> d makes that region and c's wait for each other.
	x := newGraph(t, false, []*jobplanev1.JobVertex{vertex("a", 1), vertex("c", 1), vertex("d", 1)},
		edge("a", "d", false, false), edge("a", "c", false, true), edge("c", "d", false, true))
	if x.Regions() != 1 {
		t.Fatalf("regions = %d, want 1 (the cycle merged)", x.Regions())
	}
	if got := x.Release(); len(got) != 1 {
		t.Fatalf("release = %v, want the merged region", got)
	}
	// A blocking edge inside a region: the region does not wait for itself,
	// but waits for the result's other producers.
	x = newGraph(t, false, []*jobplanev1.JobVertex{vertex("a", 2), vertex("b", 2)},
		edge("a", "b", false, false), // regions {a0,b0}, {a1,b1}
		edge("a", "b", true, true))   // every b consumes every a: a cycle
	if x.Regions() != 1 {
		t.Fatalf("regions = %d, want 1", x.Regions())
	}
	// Each b consumes its own region's a (blocking, inside the region) and
	// s (blocking, from outside): it waits for s only.
	x = newGraph(t, false, []*jobplanev1.JobVertex{vertex("a", 2), vertex("b", 2), vertex("s", 1)},
		edge("a", "b", false, false), edge("a", "b", false, true), edge("s", "b", true, true))
	if x.Regions() != 3 {
		t.Fatalf("regions = %d, want 3", x.Regions())
	}
	s := x.RegionOf(x.ExecutionVertex(2, 0))
	if got := x.Release(); !slices.Equal(got, []int{s}) {
		t.Fatalf("release = %v, want only s's region %d", got, s)
	}
	if rel := finish(x, s); len(rel) != 2 {
		t.Fatalf("finishing s released %v, want both regions of a and b", rel)
	}
}

// BenchmarkInitialSchedule builds the execution graph of two vertices
// joined ALL_TO_ALL and computes its initial schedule.
func BenchmarkInitialSchedule(b *testing.B) {
	for _, p := range []int32{4000, 10000} {
		for _, blocking := range []bool{false, true} {
			g := allToAll(p, blocking)
			b.Run(fmt.Sprintf("2x%d-all-to-all-blocking=%v", p, blocking), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					x, err := scheduler.NewExecutionGraph(g, false)
					if err != nil {
						b.Fatal(err)
					}
					want := 1
					if blocking {
						want = int(p)
					}
					if got := len(x.Release()); got != want {
						b.Fatalf("released %d regions, want %d", got, want)
					}
				}
			})
		}
	}
}

// BenchmarkFailover computes the restart set of one failed producer at
// 10,000 x 10,000 ALL_TO_ALL blocking and resets it.
func BenchmarkFailover(b *testing.B) {
	x, err := scheduler.NewExecutionGraph(allToAll(10000, true), false)
	if err != nil {
		b.Fatal(err)
	}
	x.Release()
	ev := x.ExecutionVertex(0, 7)
	b.ReportAllocs()
	for b.Loop() {
		x.SetState(ev, failed)
		set := x.RestartSet(ev)
		if len(set) != 10001 {
			b.Fatalf("restart set has %d regions", len(set))
		}
		x.Restart(set)
	}
}

// Count agrees with the states of the execution vertices after any walk
// of state changes and restarts.
func TestCountFollowsStates(t *testing.T) {
	t.Parallel()
	x := newGraph(t, false, []*jobplanev1.JobVertex{vertex("src", 3), vertex("map", 3), vertex("sink", 2)},
		edge("src", "map", false, false), edge("map", "sink", true, true))
	x.Release()
	states := []jobplanev1.ExecutionState{created, running, finished, failed, jobplanev1.ExecutionState_EXECUTION_STATE_CANCELED}
	check := func(step int) {
		t.Helper()
		want := map[jobplanev1.ExecutionState]int{}
		for ev := range int32(x.Subtasks()) {
			want[x.State(ev)]++
		}
		for s := range jobplanev1.ExecutionState(len(jobplanev1.ExecutionState_name)) {
			if got := x.Count(s); got != want[s] {
				t.Fatalf("step %d: Count(%v) = %d, want %d", step, s, got, want[s])
			}
		}
	}
	check(0)
	// A fixed walk that visits every kind of move: each vertex in turn
	// through the states, with a restart of its set every third step.
	for step := 1; step <= 60; step++ {
		ev := int32(step*7) % int32(x.Subtasks())
		x.SetState(ev, states[step%len(states)])
		if step%3 == 0 {
			x.Restart(x.RestartSet(ev))
		}
		check(step)
	}
	if x.Count(jobplanev1.ExecutionState(-1)) != 0 || x.Count(jobplanev1.ExecutionState(99)) != 0 {
		t.Error("Count of a state out of range is not 0")
	}
}

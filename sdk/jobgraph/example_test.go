package jobgraph_test

import (
	"fmt"
	"time"

	"github.com/jobplane/jobplane/sdk/jobgraph"
)

// Build a graph of two stages, the second waiting for the first.
func ExampleBuilder() {
	b := jobgraph.NewBuilder("etl")
	extract := b.Vertex("extract", "noop").Parallelism(4)
	load := b.Vertex("load", "sleep").Config("duration", "1s")
	b.Connect(extract, load).Blocking()
	b.FixedDelayRestart(3, time.Second)
	g, err := b.Build()
	if err != nil {
		panic(err)
	}
	fmt.Println(len(g.GetVertices()), "vertices,", len(g.GetEdges()), "edge,", g.GetEdges()[0].GetResultType())
	// Output: 2 vertices, 1 edge, RESULT_PARTITION_TYPE_BLOCKING
}

// Build reports every rule a graph breaks, as the server would.
func ExampleBuilder_invalid() {
	b := jobgraph.NewBuilder("loop")
	a := b.Vertex("a", "noop")
	c := b.Vertex("c", "noop").Parallelism(0)
	b.Connect(a, c)
	b.Connect(c, a)
	_, err := b.Build()
	fmt.Println(err)
	// Output: jobgraph: invalid: job_graph.vertices[1].parallelism: parallelism 0: must be at least 1; job_graph.edges: the edges form a cycle through vertex "a"
}

// Checkpoint a counting job every second, restarting it from its latest
// checkpoint after a failure; start it from a savepoint's states.
func ExampleBuilder_Checkpoints() {
	b := jobgraph.NewBuilder("count")
	b.Vertex("count", "count").Config("to", "100").Config("every", "100ms")
	b.Checkpoints(time.Second).FixedDelayRestart(3, time.Second)
	b.RestoreFromSavepoint("sp-0123")
	g, err := b.Build()
	if err != nil {
		panic(err)
	}
	fmt.Println(g.GetConfig().GetCheckpoints().GetInterval().AsDuration(), g.GetConfig().GetRestoreFromSavepoint())

	// Below the shortest interval, Build says so.
	_, err = jobgraph.NewBuilder("fast").Checkpoints(time.Millisecond).Build()
	fmt.Println(err != nil)
	// Output:
	// 1s sp-0123
	// true
}

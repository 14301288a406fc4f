package localcluster_test

import (
	"context"
	"fmt"
	"log"
	"sync/atomic"

	"github.com/jobplane/jobplane/sdk/jobgraph"
	"github.com/jobplane/jobplane/sdk/worker"
	"github.com/jobplane/jobplane/server/localcluster"
)

// A local cluster runs a job on a function of the program's own.
func Example() {
	ctx := context.Background()
	var greeted atomic.Int32
	c, err := localcluster.Start(ctx, localcluster.Config{
		Functions: map[string]worker.Func{
			"greet": func(ctx context.Context, t worker.Task) error {
				t.Logger.Info("hello", "who", t.Config["who"])
				greeted.Add(1)
				return nil
			},
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	b := jobgraph.NewBuilder("hello")
	b.Vertex("greet", "greet").Parallelism(3).Config("who", "world")
	g, err := b.Build()
	if err != nil {
		log.Fatal(err)
	}
	res, err := c.Execute(ctx, g)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.GetStatus(), greeted.Load())
	// Output: JOB_STATUS_FINISHED 3
}

// The cluster's SDK client reaches everything else: here, the job that
// Execute ran.
func ExampleCluster_Client() {
	ctx := context.Background()
	c, err := localcluster.Start(ctx, localcluster.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	b := jobgraph.NewBuilder("nothing")
	b.Vertex("v", "noop")
	g, err := b.Build()
	if err != nil {
		log.Fatal(err)
	}
	res, err := c.Execute(ctx, g)
	if err != nil {
		log.Fatal(err)
	}
	details, err := c.Client().Get(ctx, res.GetJobId())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(details.GetSummary().GetName(), details.GetSummary().GetStatus())
	// Output: nothing JOB_STATUS_FINISHED
}

package localcluster_test

import (
	"context"
	"fmt"
	"log"
	"sync/atomic"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/localcluster"
	"github.com/jobplane/jobplane/sdk/worker"
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

	res, err := c.Execute(ctx, &jobplanev1.JobGraph{
		Name: "hello",
		Vertices: []*jobplanev1.JobVertex{
			{Id: "greet", Invokable: "greet", Parallelism: 3, Config: map[string]string{"who": "world"}},
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.GetStatus(), greeted.Load())
	// Output: JOB_STATUS_FINISHED 3
}

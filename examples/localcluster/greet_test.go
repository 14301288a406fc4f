// Package localcluster_test shows a test of your own task functions on a
// whole cluster inside the test process (server/localcluster).
package localcluster_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/jobgraph"
	"github.com/jobplane/jobplane/sdk/worker"
	"github.com/jobplane/jobplane/server/localcluster"
)

func TestGreetRunsOncePerSubtask(t *testing.T) {
	var mu sync.Mutex
	greeted := map[int]string{}
	greet := func(ctx context.Context, task worker.Task) error {
		mu.Lock()
		defer mu.Unlock()
		greeted[task.SubtaskIndex] = "hello " + task.Config["name"]
		return nil
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := localcluster.Start(ctx, localcluster.Config{Functions: map[string]worker.Func{"greet": greet}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	b := jobgraph.NewBuilder("greet")
	b.Vertex("greet", "greet").Parallelism(3).Config("name", "jobplane")
	g, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Execute(ctx, g)
	if err != nil || res.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("Execute = %v, %v; want FINISHED", res, err)
	}
	if len(greeted) != 3 || !strings.HasPrefix(greeted[2], "hello jobplane") {
		t.Fatalf("greeted %v, want subtasks 0, 1 and 2", greeted)
	}
}

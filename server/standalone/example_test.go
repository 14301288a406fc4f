package standalone_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"

	"github.com/jobplane/jobplane/sdk"
	"github.com/jobplane/jobplane/sdk/jobgraph"
	"github.com/jobplane/jobplane/server/hastore/etcdstore"
	"github.com/jobplane/jobplane/server/standalone"
)

// A whole cluster in this process, and a job run on it through the SDK.
func Example() {
	dir, err := os.MkdirTemp("", "jobplane-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	cluster, err := standalone.New(context.Background(), standalone.Config{
		Store:         etcdstore.OpenConfig{DataDir: dir},
		TaskExecutors: 1,
		Logger:        slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- cluster.Run(ctx) }()

	client, err := sdk.New([]string{cluster.URL()})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	b := jobgraph.NewBuilder("example")
	b.Vertex("v", "noop").Parallelism(2)
	g, err := b.Build()
	if err != nil {
		log.Fatal(err)
	}
	// The SDK retries until the JobManager leads, a few milliseconds
	// after Run starts.
	res, err := client.Execute(ctx, g)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.GetStatus())

	client.Close()
	stop()
	if err := <-stopped; err != nil {
		log.Fatal(err)
	}
	// Output: JOB_STATUS_FINISHED
}

// Command hello submits a two-stage job to the cluster at $JOBPLANE_SERVER
// (default http://127.0.0.1:8080) and prints how it ended.
package main

import (
	"cmp"
	"context"
	"fmt"
	"log"
	"os"

	"github.com/jobplane/jobplane/sdk"
	"github.com/jobplane/jobplane/sdk/jobgraph"
)

func main() {
	c, err := sdk.New([]string{cmp.Or(os.Getenv("JOBPLANE_SERVER"), "http://127.0.0.1:8080")})
	if err != nil {
		log.Fatal(err)
	}
	b := jobgraph.NewBuilder("hello")
	b.Connect(b.Vertex("extract", "noop").Parallelism(4), b.Vertex("load", "sleep").Config("duration", "1s")).Blocking()
	g, err := b.Build()
	if err != nil {
		log.Fatal(err)
	}
	res, err := c.Execute(context.Background(), g)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.GetJobId(), res.GetStatus())
}

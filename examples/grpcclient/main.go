// Command grpcclient talks to jobplane with grpc-go's own client and the
// generated protobuf messages: the cluster's overview, then a job
// submitted and waited for. The server is $JOBPLANE_SERVER's host:port
// (default 127.0.0.1:8080), in plain HTTP/2.
package main

import (
	"cmp"
	"context"
	"fmt"
	"log"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
)

func main() {
	target := strings.TrimPrefix(cmp.Or(os.Getenv("JOBPLANE_SERVER"), "http://127.0.0.1:8080"), "http://")
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	ctx := context.Background()

	overview := new(jobplanev1.GetClusterOverviewResponse)
	if err := conn.Invoke(ctx, "/jobplane.v1.DispatcherService/GetClusterOverview", &jobplanev1.GetClusterOverviewRequest{}, overview); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("leader %s, %d TaskExecutors, %d free slots\n", overview.GetLeader().GetAddress(), overview.GetTaskExecutorCount(), overview.GetFreeSlotCount())

	job := &jobplanev1.SubmitJobRequest{JobId: "grpc-hello", JobGraph: &jobplanev1.JobGraph{
		Name:     "grpc-hello",
		Vertices: []*jobplanev1.JobVertex{{Id: "v", Invokable: "noop", Parallelism: 2}},
	}}
	if err := conn.Invoke(ctx, "/jobplane.v1.DispatcherService/SubmitJob", job, new(jobplanev1.SubmitJobResponse)); err != nil {
		log.Fatal(err)
	}
	result := new(jobplanev1.GetJobResultResponse)
	if err := conn.Invoke(ctx, "/jobplane.v1.DispatcherService/GetJobResult", &jobplanev1.GetJobResultRequest{JobId: "grpc-hello", Wait: true}, result); err != nil {
		log.Fatal(err)
	}
	fmt.Println("grpc-hello", result.GetResult().GetStatus())
}

package endpoint_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"testing"

	"connectrpc.com/connect"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
	"github.com/jobplane/jobplane/server/internal/endpoint"
)

// lister answers ListJobs with page_size jobs of 1 KiB random names, which
// compression cannot shrink.
type lister struct {
	jobplanev1connect.UnimplementedDispatcherServiceHandler
}

func (lister) ListJobs(_ context.Context, req *jobplanev1.ListJobsRequest) (*jobplanev1.ListJobsResponse, error) {
	resp := &jobplanev1.ListJobsResponse{}
	for range req.GetPageSize() {
		name := make([]byte, 512)
		_, _ = rand.Read(name)
		resp.Jobs = append(resp.Jobs, &jobplanev1.JobSummary{Name: hex.EncodeToString(name)})
	}
	return resp, nil
}

// An answer over MaxResponseBytes fails with RESOURCE_EXHAUSTED instead of
// being sent; smaller ones are sent.
func TestOversizedResponseIsNotSent(t *testing.T) {
	ep, err := endpoint.Listen(endpoint.Config{Listen: "127.0.0.1:0", MaxResponseBytes: 16 << 10}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ep.Mount(jobplanev1connect.DispatcherServiceName, func(opts ...connect.HandlerOption) (string, http.Handler) {
		return jobplanev1connect.NewDispatcherServiceHandler(lister{}, opts...)
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ep.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := jobplanev1connect.NewDispatcherServiceClient(&http.Client{Transport: tr}, ep.URL())
	if resp, err := client.ListJobs(context.Background(), &jobplanev1.ListJobsRequest{PageSize: 4}); err != nil || len(resp.GetJobs()) != 4 {
		t.Errorf("4 KiB answer: %v, %v", resp, err)
	}
	if _, err := client.ListJobs(context.Background(), &jobplanev1.ListJobsRequest{PageSize: 64}); connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Errorf("64 KiB answer: %v, want RESOURCE_EXHAUSTED", err)
	}
}

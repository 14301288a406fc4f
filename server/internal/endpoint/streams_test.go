package endpoint_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"connectrpc.com/connect"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
	"github.com/jobplane/jobplane/server/internal/endpoint"
)

// watcher serves WatchJob as a stream that lasts until its client or the
// server ends it.
type watcher struct {
	jobplanev1connect.UnimplementedDispatcherServiceHandler
	open chan struct{}
}

func (w *watcher) WatchJob(ctx context.Context, _ *jobplanev1.WatchJobRequest, stream *connect.ServerStream[jobplanev1.WatchJobResponse]) error {
	if err := stream.Send(&jobplanev1.WatchJobResponse{}); err != nil {
		return err
	}
	close(w.open)
	<-ctx.Done()
	return nil
}

// A shutdown ends the contract's open streams at once rather than
// waiting out the shutdown timeout for them (a connected worker follows
// the leader on such a stream).
func TestShutdownEndsOpenStreams(t *testing.T) {
	const timeout = time.Minute
	ep, err := endpoint.Listen(endpoint.Config{Listen: "127.0.0.1:0", ShutdownTimeout: timeout}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	w := &watcher{open: make(chan struct{})}
	ep.Handle(jobplanev1connect.NewDispatcherServiceHandler(w))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ep.Run(ctx) }()

	stream, err := jobplanev1connect.NewDispatcherServiceClient(h2cClient(t), ep.URL()).WatchJob(context.Background(), &jobplanev1.WatchJobRequest{JobId: "j"})
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() {
		t.Fatalf("no first message: %v", stream.Err())
	}
	<-w.open
	began := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
	case <-time.After(timeout / 2):
		t.Fatalf("the shutdown still waits for the open stream %v after it began; want the stream ended at once", time.Since(began))
	}
	for stream.Receive() {
	}
}

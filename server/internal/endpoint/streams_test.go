package endpoint_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"

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

// lockedBuffer is a bytes.Buffer safe for the logger's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A shutdown does not wait for a client's idle HTTP/2 connection (a
// connected worker's) to answer its GOAWAY, which takes the server's
// HTTP/2 a second: once no request runs, the connections are closed, well
// within a shutdown timeout of half a second.
func TestShutdownClosesIdleConnections(t *testing.T) {
	var logs lockedBuffer
	ep, err := endpoint.Listen(endpoint.Config{Listen: "127.0.0.1:0", ShutdownTimeout: 500 * time.Millisecond}, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ep.Run(ctx) }()
	// A call that ends leaves its HTTP/2 connection open and idle.
	client := grpchealth.NewClient(h2cClient(t), ep.URL())
	for {
		if _, err := client.Check(context.Background(), &grpchealth.CheckRequest{}); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
	if strings.Contains(logs.String(), "shutdown timed out") {
		t.Errorf("the shutdown timed out waiting for an idle connection:\n%s", logs.String())
	}
}

package endpoint_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"

	"github.com/jobplane/jobplane/server/internal/endpoint"
)

// SetServing flips a mounted service's health, as Check and Watch see
// it, without touching the other services or the process's ""; shutdown
// turns everything NOT_SERVING.
func TestSetServing(t *testing.T) {
	ep, err := endpoint.Listen(endpoint.Config{Listen: "127.0.0.1:0", ShutdownTimeout: 2 * time.Second}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	const leaderOnly, always = "grpc.reflection.v1alpha.ServerReflection", "grpc.reflection.v1.ServerReflection"
	for i, svc := range []string{leaderOnly, always} {
		ep.Mount(svc, func(...connect.HandlerOption) (string, http.Handler) {
			return []string{"/test.a/", "/test.b/"}[i], http.NotFoundHandler()
		})
	}
	ep.SetServing(leaderOnly, false) // before Run, as a standby starts
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ep.Run(ctx) }()
	stopped := false
	defer func() {
		if !stopped {
			cancel()
			<-done
		}
	}()

	hc := grpchealth.NewClient(h2cClient(t), ep.URL(), connect.WithGRPC())
	check := func(svc string, want grpchealth.Status) {
		t.Helper()
		resp, err := hc.Check(context.Background(), &grpchealth.CheckRequest{Service: svc})
		if err != nil || resp.Status != want {
			t.Errorf("Check(%q) = %v, %v; want %v", svc, resp, err, want)
		}
	}
	check(leaderOnly, grpchealth.StatusNotServing)
	check(always, grpchealth.StatusServing)
	check("", grpchealth.StatusServing)

	wctx, stopWatch := context.WithTimeout(context.Background(), 10*time.Second)
	defer stopWatch()
	events := hc.Watch(wctx, &grpchealth.CheckRequest{Service: leaderOnly})
	next := func(want grpchealth.Status) {
		t.Helper()
		ev := <-events
		if ev.Err != nil || ev.Response.Status != want {
			t.Fatalf("watch event = %+v, want %v", ev, want)
		}
	}
	next(grpchealth.StatusNotServing)
	ep.SetServing(leaderOnly, true)
	next(grpchealth.StatusServing)
	check(leaderOnly, grpchealth.StatusServing)
	ep.SetServing(leaderOnly, false)
	next(grpchealth.StatusNotServing)
	ep.SetServing(leaderOnly, true)
	next(grpchealth.StatusServing)

	cancel() // shutdown begins: NOT_SERVING before the listener closes
	next(grpchealth.StatusNotServing)
	stopWatch()
	for range events {
	}
	stopped = true
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

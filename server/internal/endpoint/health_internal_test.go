package endpoint

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"testing"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
)

// Once shutdown began, a component's late SetServing (a leadership
// granted as the process stops, say) cannot turn a service SERVING again.
func TestSetServingAfterShutdownIsIgnored(t *testing.T) {
	ep, err := Listen(Config{Listen: "127.0.0.1:0"}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	const svc = "grpc.reflection.v1.ServerReflection"
	ep.Mount(svc, func(...connect.HandlerOption) (string, http.Handler) { return "/test.only/", http.NotFoundHandler() })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := ep.Run(ctx); err != nil {
		t.Fatalf("Run: %v", err)
	}
	ep.SetServing(svc, true)
	for _, name := range []string{svc, ""} {
		resp, err := ep.health.Check(context.Background(), &grpchealth.CheckRequest{Service: name})
		if err != nil || resp.Status != grpchealth.StatusNotServing {
			t.Errorf("Check(%q) after shutdown and SetServing(true) = %v, %v; want NOT_SERVING", name, resp, err)
		}
	}
}

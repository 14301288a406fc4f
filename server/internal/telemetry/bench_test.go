package telemetry_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"

	"github.com/jobplane/jobplane/server/internal/telemetry"
)

// BenchmarkUnaryCall measures one unary call over HTTP/1.1 on loopback,
// with and without the RPC interceptor on both ends (metrics on, no trace
// exporter, as a server runs by default): the interceptor's cost per call.
func BenchmarkUnaryCall(b *testing.B) {
	tel, err := telemetry.Setup(context.Background(), telemetry.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = tel.Shutdown(context.Background()) }()
	for _, bc := range []struct {
		name   string
		server []connect.HandlerOption
		client []connect.ClientOption
	}{
		{"plain", nil, nil},
		{"otel", []connect.HandlerOption{connect.WithInterceptors(telemetry.RPC(), telemetry.Fencing())}, []connect.ClientOption{connect.WithInterceptors(telemetry.RPC())}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			mux := http.NewServeMux()
			mux.Handle(grpchealth.NewHandler(grpchealth.NewStaticChecker("x"), bc.server...))
			srv := httptest.NewServer(mux)
			defer srv.Close()
			client := grpchealth.NewClient(srv.Client(), srv.URL, bc.client...)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := client.Check(ctx, &grpchealth.CheckRequest{Service: "x"}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

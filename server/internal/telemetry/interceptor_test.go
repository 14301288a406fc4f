package telemetry_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/jobplane/jobplane/sdk/wire/apierror"
	"github.com/jobplane/jobplane/server/internal/telemetry"
)

// The RPC interceptor traces calls on both ends, the handler continuing
// the caller's trace, and leaves heartbeats and health checks untraced.
func TestRPCTracesCallsButNotHeartbeats(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	otel.SetTracerProvider(tp)
	setup(t) // builds the interceptor anew, on tp

	ok := func(context.Context, *connect.Request[emptypb.Empty]) (*connect.Response[emptypb.Empty], error) {
		return connect.NewResponse(&emptypb.Empty{}), nil
	}
	mux := http.NewServeMux()
	for _, proc := range []string{"/test.v1.TestService/Work", "/test.v1.TestService/Heartbeat", "/grpc.health.v1.Health/Check"} {
		mux.Handle(proc, connect.NewUnaryHandler(proc, ok, connect.WithInterceptors(telemetry.RPC())))
	}
	srv := httptest.NewServer(mux)
	defer srv.Close()
	call := func(proc string) {
		c := connect.NewClient[emptypb.Empty, emptypb.Empty](srv.Client(), srv.URL+proc, connect.WithInterceptors(telemetry.RPC()))
		if _, err := c.CallUnary(context.Background(), connect.NewRequest(&emptypb.Empty{})); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		call("/test.v1.TestService/Heartbeat")
		call("/grpc.health.v1.Health/Check")
	}
	call("/test.v1.TestService/Work")

	spans := rec.Ended()
	if len(spans) != 2 {
		for _, s := range spans {
			t.Logf("span %s", s.Name())
		}
		t.Fatalf("%d spans, want 2 (client and server of Work; none of Heartbeat or Check)", len(spans))
	}
	var client, server sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() != "test.v1.TestService/Work" {
			t.Errorf("span %q, want only Work's", s.Name())
		}
		switch s.SpanKind() {
		case trace.SpanKindClient:
			client = s
		case trace.SpanKindServer:
			server = s
		}
	}
	if client == nil || server == nil {
		t.Fatal("want a client and a server span")
	}
	if server.Parent().SpanID() != client.SpanContext().SpanID() || server.SpanContext().TraceID() != client.SpanContext().TraceID() {
		t.Errorf("the server span's parent is %v, want the client span %v", server.Parent(), client.SpanContext())
	}
}

// Handlers' refusals for a stale fencing token are counted by service,
// except the HA store's (its store counts them); other errors are not.
func TestFencingCountsStaleTokenRefusals(t *testing.T) {
	tel := setup(t)
	refuse := func(err error) func(context.Context, *connect.Request[emptypb.Empty]) (*connect.Response[emptypb.Empty], error) {
		return func(context.Context, *connect.Request[emptypb.Empty]) (*connect.Response[emptypb.Empty], error) {
			return nil, err
		}
	}
	stale := apierror.StaleToken("job/j", "s", 7)
	mux := http.NewServeMux()
	for proc, err := range map[string]error{
		"/jobplane.cluster.v1.TaskExecutorService/SubmitTask":  stale,
		"/jobplane.hastore.v1.HAStoreService/PutExecutionPlan": stale,
		"/jobplane.cluster.v1.JobMasterService/OfferSlots":     connect.NewError(connect.CodeInternal, nil),
	} {
		mux.Handle(proc, connect.NewUnaryHandler(proc, refuse(err), connect.WithInterceptors(telemetry.Fencing())))
	}
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for _, proc := range []string{
		"/jobplane.cluster.v1.TaskExecutorService/SubmitTask", "/jobplane.cluster.v1.TaskExecutorService/SubmitTask",
		"/jobplane.hastore.v1.HAStoreService/PutExecutionPlan", "/jobplane.cluster.v1.JobMasterService/OfferSlots",
	} {
		c := connect.NewClient[emptypb.Empty, emptypb.Empty](srv.Client(), srv.URL+proc)
		if _, err := c.CallUnary(context.Background(), connect.NewRequest(&emptypb.Empty{})); err == nil {
			t.Fatalf("%s: no error", proc)
		}
	}
	got := scrape(t, tel)
	if !strings.Contains(got, `jobplane_fencing_rejections_total{service="TaskExecutorService"} 2`) {
		t.Errorf("want 2 TaskExecutorService refusals counted:\n%s", got)
	}
	if strings.Contains(got, `service="HAStoreService"`) || !strings.Contains(got, `jobplane_fencing_rejections_total{service="JobMasterService"} 0`) {
		t.Errorf("counted a refusal of the store's handler or another error:\n%s", got)
	}
}

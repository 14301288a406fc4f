package jobtrace_test

import (
	"context"
	"net/http"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/jobplane/jobplane/sdk/wire/jobtrace"
)

func TestDeploymentTraceRoundTrips(t *testing.T) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled,
	})
	h := http.Header{}
	h.Set("Traceparent", "00-ffffffffffffffffffffffffffffffff-ffffffffffffffff-01") // the call's own
	jobtrace.SetDeployment(trace.ContextWithSpanContext(context.Background(), sc), h)
	if h.Get("Jobplane-Deployment-Traceparent") == "" {
		t.Fatalf("no deployment traceparent in %v", h)
	}
	got := trace.SpanContextFromContext(jobtrace.Deployment(context.Background(), h))
	if got.TraceID() != sc.TraceID() || got.SpanID() != sc.SpanID() || !got.IsRemote() {
		t.Errorf("Deployment = %v, want the remote %v", got, sc)
	}

	empty := http.Header{}
	jobtrace.SetDeployment(context.Background(), empty)
	if len(empty) != 0 {
		t.Errorf("SetDeployment without a span wrote %v", empty)
	}
	if got := trace.SpanContextFromContext(jobtrace.Deployment(context.Background(), empty)); got.IsValid() {
		t.Errorf("Deployment of an empty header = %v, want none", got)
	}
}

func TestStartFallsBackToParent(t *testing.T) {
	parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{9}, SpanID: trace.SpanID{8}, TraceFlags: trace.FlagsSampled})
	// Without a tracer provider the span is a no-op carrying its parent.
	ctx, span := jobtrace.Start(context.Background(), parent, "x")
	defer span.End()
	if got := trace.SpanContextFromContext(ctx).TraceID(); got != parent.TraceID() {
		t.Errorf("trace id %v, want the parent's %v", got, parent.TraceID())
	}
}

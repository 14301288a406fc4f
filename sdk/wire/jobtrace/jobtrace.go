// Package jobtrace carries a job's trace through the server: the tracer
// of jobplane's own spans, and the trace context of deployments that
// travel in an OfferSlots answer rather than in a call of their own.
//
// It depends on the OpenTelemetry API only (no SDK, no exporter), so the
// TaskExecutor runtime that workers link stays small; with no tracer
// provider installed its spans are no-ops that still carry their parent's
// trace context.
package jobtrace

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// name is the instrumentation scope of jobplane's spans.
const name = "github.com/jobplane/jobplane/server"

// Tracer returns the tracer of jobplane's spans, from the global tracer
// provider.
func Tracer() trace.Tracer { return otel.GetTracerProvider().Tracer(name) }

// Start starts a span named spanName as a child of the span in ctx (or of
// parent, if ctx has none and parent is valid).
func Start(ctx context.Context, parent trace.SpanContext, spanName string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if !trace.SpanContextFromContext(ctx).IsValid() && parent.IsValid() {
		ctx = trace.ContextWithSpanContext(ctx, parent)
	}
	return Tracer().Start(ctx, spanName, opts...)
}

// deploymentPrefix prefixes the W3C trace-context headers (traceparent,
// tracestate) of the deployments an OfferSlots answer carries: the
// answer's own headers belong to the call, which the TaskExecutor made.
const deploymentPrefix = "Jobplane-Deployment-"

// prefixed is a propagation.TextMapCarrier over h whose keys carry
// deploymentPrefix.
type prefixed http.Header

func (p prefixed) Get(key string) string { return http.Header(p).Get(deploymentPrefix + key) }
func (p prefixed) Set(key, value string) { http.Header(p).Set(deploymentPrefix+key, value) }
func (p prefixed) Keys() []string {
	var keys []string
	for k := range p {
		if len(k) > len(deploymentPrefix) && http.CanonicalHeaderKey(k[:len(deploymentPrefix)]) == deploymentPrefix {
			keys = append(keys, k[len(deploymentPrefix):])
		}
	}
	return keys
}

// SetDeployment writes the trace context of the span in ctx, if any, to
// h as the trace of the deployments in an answer.
func SetDeployment(ctx context.Context, h http.Header) {
	if trace.SpanContextFromContext(ctx).IsValid() {
		propagation.TraceContext{}.Inject(ctx, prefixed(h))
	}
}

// Deployment returns the trace context that SetDeployment wrote to h, as
// a remote span context in a context derived from ctx; ctx itself if h
// has none.
func Deployment(ctx context.Context, h http.Header) context.Context {
	return propagation.TraceContext{}.Extract(ctx, prefixed(h))
}

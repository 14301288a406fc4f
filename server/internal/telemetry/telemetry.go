package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Config configures Setup.
type Config struct {
	// ServiceName is the service.name resource attribute, such as
	// "jobplane-jobmanager"; OTEL_SERVICE_NAME overrides it. Default:
	// "jobplane".
	ServiceName string
}

// Telemetry is a process's OpenTelemetry setup, made by Setup.
type Telemetry struct {
	meters  *sdkmetric.MeterProvider
	tracer  *sdktrace.TracerProvider // nil: no trace exporter
	metrics http.Handler
}

// Setup builds the process's telemetry and installs it as the
// OpenTelemetry globals and as the provider of this package's
// instruments:
//   - a meter provider whose Prometheus exporter, on a registry of its
//     own (with the Go runtime and process collectors), is served by
//     MetricsHandler; and, when OTEL_EXPORTER_OTLP_ENDPOINT or
//     OTEL_EXPORTER_OTLP_METRICS_ENDPOINT is set (and OTEL_METRICS_EXPORTER
//     is not "none"), a periodic OTLP exporter too
//     (OTEL_METRIC_EXPORT_INTERVAL, default 60s);
//   - when OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
//     is set (and OTEL_TRACES_EXPORTER is not "none"), a tracer provider
//     with a batching OTLP exporter (OTEL_BSP_SCHEDULE_DELAY and the other
//     OTEL_BSP_* variables; sampling by OTEL_TRACES_SAMPLER, default
//     parent-based always-on). Without one no tracer provider is
//     installed: spans cost nothing and go nowhere, while trace context
//     received from callers still propagates;
//   - W3C trace context and baggage as the propagator.
//
// The OTLP protocol is OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or
// OTEL_EXPORTER_OTLP_METRICS_PROTOCOL, else OTEL_EXPORTER_OTLP_PROTOCOL:
// "http/protobuf" (the default) or "grpc"; the exporters read the other
// OTEL_EXPORTER_OTLP_* variables (headers, timeout, TLS) themselves. Setup
// fails on an unknown protocol or an exporter that cannot be built; it
// does not connect to the collector.
func Setup(ctx context.Context, cfg Config) (*Telemetry, error) {
	name := cfg.ServiceName
	if name == "" {
		name = "jobplane"
	}
	// Later options override earlier ones: OTEL_SERVICE_NAME and
	// OTEL_RESOURCE_ATTRIBUTES win over the default name.
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", name)),
		resource.WithFromEnv(),
		resource.WithTelemetrySDK(),
	)
	if err != nil {
		return nil, fmt.Errorf("telemetry: resource: %w", err)
	}

	reg := prometheus.NewRegistry()
	// Beside the default Go metrics, the runtime's estimate of the CPU
	// its garbage collector used (go_cpu_classes_gc_*_cpu_seconds_total):
	// over process_cpu_seconds_total, the share of the process's CPU that
	// went to the GC.
	reg.MustRegister(collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(gcCPU)), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	prom, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo())
	if err != nil {
		return nil, fmt.Errorf("telemetry: prometheus exporter: %w", err)
	}
	meterOpts := []sdkmetric.Option{sdkmetric.WithResource(res), sdkmetric.WithReader(prom)}
	if otlpWanted("METRICS") {
		exp, err := newMetricExporter(ctx, protocol("METRICS"))
		if err != nil {
			return nil, err
		}
		meterOpts = append(meterOpts, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp)))
	}
	t := &Telemetry{
		meters:  sdkmetric.NewMeterProvider(meterOpts...),
		metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
	}
	if otlpWanted("TRACES") {
		exp, err := newSpanExporter(ctx, protocol("TRACES"))
		if err != nil {
			_ = t.meters.Shutdown(ctx)
			return nil, err
		}
		t.tracer = sdktrace.NewTracerProvider(sdktrace.WithResource(res), sdktrace.WithBatcher(exp))
		otel.SetTracerProvider(t.tracer)
	}
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	otel.SetMeterProvider(t.meters)
	if err := install(t.meters); err != nil {
		_ = t.Shutdown(ctx)
		return nil, err
	}
	return t, nil
}

// MetricsHandler serves the process's metrics in the Prometheus text
// format, as GET /metrics.
func (t *Telemetry) MetricsHandler() http.Handler { return t.metrics }

// Tracing reports whether spans are exported (an OTLP trace exporter is
// configured).
func (t *Telemetry) Tracing() bool { return t.tracer != nil }

// Shutdown flushes what the exporters hold and stops them; ctx bounds the
// flush. The instruments turn into no-ops.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	uninstall(t.meters)
	var errs []error
	if t.tracer != nil {
		errs = append(errs, t.tracer.Shutdown(ctx))
	}
	errs = append(errs, t.meters.Shutdown(ctx))
	return errors.Join(errs...)
}

// otlpWanted reports whether the standard variables ask for OTLP export
// of signal ("TRACES" or "METRICS").
func otlpWanted(signal string) bool {
	if strings.EqualFold(os.Getenv("OTEL_"+signal+"_EXPORTER"), "none") {
		return false
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_"+signal+"_ENDPOINT") != ""
}

// protocol is the OTLP protocol the variables name for signal.
func protocol(signal string) string {
	if p := os.Getenv("OTEL_EXPORTER_OTLP_" + signal + "_PROTOCOL"); p != "" {
		return p
	}
	if p := os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL"); p != "" {
		return p
	}
	return "http/protobuf"
}

func newSpanExporter(ctx context.Context, proto string) (sdktrace.SpanExporter, error) {
	var (
		exp sdktrace.SpanExporter
		err error
	)
	switch proto {
	case "http/protobuf":
		exp, err = otlptracehttp.New(ctx)
	case "grpc":
		exp, err = otlptracegrpc.New(ctx)
	default:
		return nil, fmt.Errorf("telemetry: OTLP protocol %q: want http/protobuf or grpc", proto)
	}
	if err != nil {
		return nil, fmt.Errorf("telemetry: OTLP trace exporter: %w", err)
	}
	return exp, nil
}

func newMetricExporter(ctx context.Context, proto string) (sdkmetric.Exporter, error) {
	var (
		exp sdkmetric.Exporter
		err error
	)
	switch proto {
	case "http/protobuf":
		exp, err = otlpmetrichttp.New(ctx)
	case "grpc":
		exp, err = otlpmetricgrpc.New(ctx)
	default:
		return nil, fmt.Errorf("telemetry: OTLP protocol %q: want http/protobuf or grpc", proto)
	}
	if err != nil {
		return nil, fmt.Errorf("telemetry: OTLP metric exporter: %w", err)
	}
	return exp, nil
}

// gcCPU selects the runtime/metrics of the GC's CPU time
// (/cpu/classes/gc/...: mark assists, dedicated, idle, pauses and their
// total).
var gcCPU = collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/cpu/classes/gc/`)}

// Package telemetry owns a server process's OpenTelemetry setup: the meter
// provider whose Prometheus exporter serves GET /metrics, OTLP export of
// traces and metrics when the standard OTEL_EXPORTER_OTLP_* variables ask
// for it, W3C trace-context propagation, the connect interceptors that
// trace and measure every RPC, the jobplane metrics that components
// record, and a slog handler that adds the trace and span ids of a
// context to log records.
//
// It holds process-wide state (the OpenTelemetry globals and the current
// instruments): a process calls Setup once, before it builds its
// components, and Shutdown on exit. Until Setup, every recording function
// is a no-op, so components and their tests need no setup. It must not
// hold per-job state: recording costs no timer, goroutine or allocation
// per job beyond the call itself.
package telemetry

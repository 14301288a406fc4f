package main

import (
	"context"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/jobplane/jobplane/server/internal/telemetry"
)

// processTelemetry is a server process's telemetry (see telemetry.Setup),
// with the logger its shutdown reports to.
type processTelemetry struct {
	*telemetry.Telemetry
	log *slog.Logger
}

// setupTelemetry sets up the process's metrics and traces under the
// service name service (OTEL_SERVICE_NAME overrides it).
func setupTelemetry(service string, log *slog.Logger) (processTelemetry, error) {
	// Export failures (a collector down) go to the process log, not to
	// OpenTelemetry's own logger on stderr.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("telemetry", "err", err) }))
	t, err := telemetry.Setup(context.Background(), telemetry.Config{ServiceName: service})
	if err != nil {
		return processTelemetry{}, err
	}
	if t.Tracing() {
		log.Info("exporting traces over OTLP")
	}
	return processTelemetry{Telemetry: t, log: log}, nil
}

// shutdown flushes what the exporters hold, for up to 5 seconds.
func (p processTelemetry) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.Shutdown(ctx); err != nil {
		p.log.Warn("flushing telemetry", "err", err)
	}
}

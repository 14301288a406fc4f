package telemetry

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

// LogHandler wraps h so that a record logged with a context (the
// *Context methods of slog.Logger, such as InfoContext) whose span
// context is valid carries its trace_id and span_id, in the hexadecimal
// form that trace backends show, and a log line can be found from its
// trace and the trace from the line. Records without one pass unchanged.
func LogHandler(h slog.Handler) slog.Handler { return logHandler{h} }

type logHandler struct{ next slog.Handler }

func (l logHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return l.next.Enabled(ctx, level)
}

func (l logHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return l.next.Handle(ctx, r)
}

func (l logHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return logHandler{l.next.WithAttrs(attrs)}
}

func (l logHandler) WithGroup(name string) slog.Handler {
	return logHandler{l.next.WithGroup(name)}
}

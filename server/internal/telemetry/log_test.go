package telemetry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/jobplane/jobplane/server/internal/telemetry"
)

func TestLogHandlerAddsTraceAndSpanIDs(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(telemetry.LogHandler(slog.NewJSONHandler(&buf, nil))).With("job", "j1")
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{0x0a, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, SpanID: trace.SpanID{0x0b, 1, 2, 3, 4, 5, 6, 7},
		TraceFlags: trace.FlagsSampled,
	})
	log.InfoContext(trace.ContextWithSpanContext(context.Background(), sc), "traced")
	log.InfoContext(context.Background(), "untraced")
	log.Info("plain")

	dec := json.NewDecoder(&buf)
	for _, want := range []struct {
		msg, traceID, spanID string
	}{
		{"traced", "0a0102030405060708090a0b0c0d0e0f", "0b01020304050607"},
		{"untraced", "", ""},
		{"plain", "", ""},
	} {
		var rec map[string]any
		if err := dec.Decode(&rec); err != nil {
			t.Fatal(err)
		}
		if rec["msg"] != want.msg || rec["job"] != "j1" {
			t.Fatalf("record %v, want msg %q with job j1", rec, want.msg)
		}
		got := func(k string) string { s, _ := rec[k].(string); return s }
		if got("trace_id") != want.traceID || got("span_id") != want.spanID {
			t.Errorf("%s: trace_id %q span_id %q, want %q %q", want.msg, got("trace_id"), got("span_id"), want.traceID, want.spanID)
		}
	}
	if !log.Handler().Enabled(context.Background(), slog.LevelInfo) || log.Handler().Enabled(context.Background(), slog.LevelDebug) {
		t.Error("Enabled does not follow the wrapped handler's level")
	}
}

package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/jobplane/jobplane/server/internal/telemetry"
)

// logFlags are the logging flags shared by every server subcommand.
type logFlags struct {
	level  string
	format string
}

func (l *logFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&l.level, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&l.format, "log-format", "text", "log format: text or json")
}

// logger builds the process logger writing to w; lines logged with a
// traced context carry its trace_id and span_id (telemetry.LogHandler).
func (l *logFlags) logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(l.level)); err != nil {
		return nil, fmt.Errorf("-log-level %q: want debug, info, warn or error", l.level)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch strings.ToLower(l.format) {
	case "text":
		return slog.New(telemetry.LogHandler(slog.NewTextHandler(w, opts))), nil
	case "json":
		return slog.New(telemetry.LogHandler(slog.NewJSONHandler(w, opts))), nil
	default:
		return nil, fmt.Errorf("-log-format %q: want text or json", l.format)
	}
}

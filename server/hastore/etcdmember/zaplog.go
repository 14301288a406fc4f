package etcdmember

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync/atomic"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// zapToSlog returns a zap logger that writes into log, so the embedded
// etcd member's logs join the process's own. etcd's Info level is chatty
// (every raft step and compaction), so it maps to slog's Debug; Warn and
// above keep their level.
func zapToSlog(log *slog.Logger) *zap.Logger {
	return zapToSlogClosing(log, nil)
}

// zapToSlogClosing is zapToSlog for an embedded member: once closing is
// set, the errors etcd logs about its own listeners shutting down are
// demoted to Debug.
func zapToSlogClosing(log *slog.Logger, closing *atomic.Bool) *zap.Logger {
	return zap.New(&slogCore{log: log.With("component", "etcd"), closing: closing})
}

type slogCore struct {
	log     *slog.Logger
	attrs   []any
	closing *atomic.Bool
}

// benign are etcd messages that do not apply to the embedded member,
// which listens on loopback only and runs without authentication, or that
// etcd logs as errors on every fresh start and then retries by itself.
var benign = map[string]bool{
	"Running http and grpc server on single port. This is not recommended for production.": true,
	"simple token is not cryptographically signed":                                         true,
	"failed to update storage version":                                                     true,
}

func slogLevel(l zapcore.Level) slog.Level {
	switch {
	case l <= zapcore.InfoLevel:
		return slog.LevelDebug
	case l == zapcore.WarnLevel:
		return slog.LevelWarn
	default:
		return slog.LevelError
	}
}

func (c *slogCore) Enabled(l zapcore.Level) bool {
	return c.log.Enabled(context.Background(), slogLevel(l))
}

func (c *slogCore) With(fields []zapcore.Field) zapcore.Core {
	return &slogCore{log: c.log, attrs: append(append([]any(nil), c.attrs...), fieldsToAttrs(fields)...), closing: c.closing}
}

func (c *slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *slogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	attrs := append(append([]any(nil), c.attrs...), fieldsToAttrs(fields)...)
	if e.LoggerName != "" {
		attrs = append(attrs, "logger", e.LoggerName)
	}
	level := slogLevel(e.Level)
	if benign[e.Message] || closedListener(fields) || c.closing != nil && c.closing.Load() {
		// etcd reports its own listeners closing at shutdown as errors.
		level = slog.LevelDebug
	}
	c.log.Log(context.Background(), level, e.Message, attrs...)
	return nil
}

// closedListener reports whether a log entry's error is a closed network
// connection, which etcd logs as an error on every clean shutdown.
func closedListener(fields []zapcore.Field) bool {
	for _, f := range fields {
		if err, ok := f.Interface.(error); ok && f.Type == zapcore.ErrorType && errors.Is(err, net.ErrClosed) {
			return true
		}
	}
	return false
}

func (c *slogCore) Sync() error { return nil }

func fieldsToAttrs(fields []zapcore.Field) []any {
	if len(fields) == 0 {
		return nil
	}
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range fields {
		f.AddTo(enc)
	}
	attrs := make([]any, 0, len(enc.Fields))
	for k, v := range enc.Fields {
		attrs = append(attrs, slog.Any(k, v))
	}
	return attrs
}

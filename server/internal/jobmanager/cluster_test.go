package jobmanager_test

import (
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/jobplane/jobplane/server/localcluster"
)

// newCluster starts an in-process cluster that closes when the test ends,
// on the shape and timings these tests were written for wherever cfg
// leaves them zero: two TaskExecutors, heartbeats every 100ms borne for
// 1s, a session TTL of twice the heartbeat timeout (2s at least), a cancel
// grace of 100ms, and logs (testLogger) dropped unless JOBPLANE_TEST_LOGS
// is set.
func newCluster(t testing.TB, cfg localcluster.Config) *localcluster.Cluster {
	t.Helper()
	if cfg.TaskExecutors == 0 {
		cfg.TaskExecutors = 2
	}
	if cfg.HeartbeatTimeout == 0 {
		cfg.HeartbeatTimeout = time.Second
	}
	if cfg.HeartbeatInterval == 0 {
		cfg.HeartbeatInterval = 100 * time.Millisecond
	}
	if cfg.SessionTTL == 0 {
		cfg.SessionTTL = max(2*cfg.HeartbeatTimeout, 2*time.Second)
	}
	if cfg.CancelGrace == 0 {
		cfg.CancelGrace = 100 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger()
	}
	return localcluster.New(t, cfg)
}

// testLogger drops logs unless the environment sets JOBPLANE_TEST_LOGS,
// and then writes every record, debug too, to stderr.
func testLogger() *slog.Logger {
	if os.Getenv("JOBPLANE_TEST_LOGS") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

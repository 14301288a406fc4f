package etcdmember_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/server/hastore/etcdmember"
	"github.com/jobplane/jobplane/server/hastore/etcdstore"
)

// quietLogger drops logs unless JOBPLANE_TEST_LOGS is set.
func quietLogger() *slog.Logger {
	if os.Getenv("JOBPLANE_TEST_LOGS") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// newMember starts a member on a test directory, closed with the test.
func newMember(t *testing.T, cfg etcdmember.Config) *etcdmember.Member {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := etcdmember.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// newStore opens a store on m with a client of its own, as another
// process would, closed with the test.
func newStore(t *testing.T, m *etcdmember.Member) *etcdstore.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := etcdstore.Open(ctx, etcdstore.OpenConfig{Endpoints: []string{m.Endpoint()}, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func testPlan(jobID string) *hastorev1.ExecutionPlan {
	return &hastorev1.ExecutionPlan{JobId: jobID, JobGraph: &jobplanev1.JobGraph{Name: jobID}}
}

package etcdstore_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/hastore/etcdmember"
	"github.com/jobplane/jobplane/server/hastore/etcdstore"
	"github.com/jobplane/jobplane/server/hastore/storetest"
)

// quietLogger drops logs unless JOBPLANE_TEST_LOGS is set.
func quietLogger() *slog.Logger {
	if os.Getenv("JOBPLANE_TEST_LOGS") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// embedded is a single embedded etcd member on a test directory that can
// be restarted on the same data.
type embedded struct {
	dir    string
	cfg    etcdmember.Config
	member *etcdmember.Member
}

func startEmbedded(t *testing.T, cfg etcdmember.Config) *embedded {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	e := &embedded{dir: cfg.Dir, cfg: cfg}
	e.start(t)
	t.Cleanup(func() { e.member.Close() })
	return e
}

func (e *embedded) start(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := etcdmember.Start(ctx, e.cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	e.member = m
}

// restart stops the member and starts it again on the same data and
// addresses, as a restarted process would be.
func (e *embedded) restart(t *testing.T) {
	t.Helper()
	e.cfg.ClientAddr = strings.TrimPrefix(e.member.Endpoint(), "http://")
	e.member.Close()
	e.start(t)
}

// client returns a client of the current member, closed with the test.
func (e *embedded) client(t *testing.T) *clientv3.Client {
	t.Helper()
	c, err := e.member.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// store opens a store on the member with a client of its own, as another
// process would; closing the store closes the client.
func (e *embedded) store(t *testing.T, prefix string) *etcdstore.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := etcdstore.Open(ctx, etcdstore.OpenConfig{Endpoints: []string{e.member.Endpoint()}, Prefix: prefix, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestEtcdContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) *storetest.Backend {
		e := startEmbedded(t, etcdmember.Config{})
		return &storetest.Backend{
			Open:         func(storetest.T) hastore.Store { return e.store(t, "") },
			Restart:      func(storetest.T) { e.restart(t) },
			MaxPlanBytes: hastore.DefaultMaxPlanBytes,
		}
	})
}

// Two clusters sharing one etcd under different prefixes see nothing of
// each other.
func TestEtcdPrefixesIsolateClusters(t *testing.T) {
	e := startEmbedded(t, etcdmember.Config{})
	a, b := e.store(t, "/a/"), e.store(t, "/b/")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sa, err := a.OpenSession(ctx, hastore.SessionConfig{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	la, err := sa.Campaign(ctx, election.JobManager, "a")
	if err != nil {
		t.Fatal(err)
	}
	sb, err := b.OpenSession(ctx, hastore.SessionConfig{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// b's campaign is granted although a leads the same election name.
	lb, err := sb.Campaign(ctx, election.JobManager, "b")
	if err != nil {
		t.Fatal(err)
	}
	if err := a.PutExecutionPlan(ctx, la.Fence(), testPlan("p")); err != nil {
		t.Fatal(err)
	}
	if ids, err := b.ListExecutionPlans(ctx, "", 0); err != nil || len(ids) != 0 {
		t.Errorf("cluster b sees plans %v, %v", ids, err)
	}
	if err := b.PutExecutionPlan(ctx, la.Fence(), testPlan("p")); err == nil {
		t.Error("cluster b accepted a write fenced by cluster a's leader")
	}
	if info, _ := b.Leader(ctx, election.JobManager); info.Token != lb.Token() {
		t.Errorf("cluster b's leader = %+v, want its own", info)
	}
}

func testPlan(jobID string) *hastorev1.ExecutionPlan {
	return &hastorev1.ExecutionPlan{JobId: jobID, JobGraph: &jobplanev1.JobGraph{Name: jobID}}
}

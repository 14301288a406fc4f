package resourcemanager

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/hastore/etcdstore"
	"github.com/jobplane/jobplane/server/hastore/hastorerpc"
)

// A TaskExecutor is a member, in the store, once its registration is
// answered; it stays one after it went silent and was dropped, until any
// lease it could hold has ended, and is then removed; registering again
// makes it a member again. A new leader reads the members the store
// holds, with no address until they register with it.
func TestMembershipFollowsRegistrations(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store, quiet := openStore(ctx, t)
	const lease = 500 * time.Millisecond
	lead := func() (*ResourceManager, election.Token, context.CancelFunc) {
		t.Helper()
		sess, err := store.OpenSession(ctx, hastore.SessionConfig{TTL: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		l, err := sess.Campaign(ctx, election.JobManager, "")
		if err != nil {
			t.Fatal(err)
		}
		rm, err := New(Config{HTTPClient: http.DefaultClient, HeartbeatInterval: 50 * time.Millisecond, HeartbeatTimeout: 200 * time.Millisecond,
			Logger: quiet, Members: store, TaskLease: lease, Elections: store})
		if err != nil {
			t.Fatal(err)
		}
		lctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = rm.Lead(lctx, l) }()
		return rm, l.Token(), func() { stop(); <-done; _ = sess.Close(context.Background()) }
	}
	members := func() []string {
		t.Helper()
		ids, err := store.TaskExecutors(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	rm, token, stop := lead()
	before := time.Now()
	registerTaskExecutor(ctx, t, rm, token)
	if got := members(); !slices.Equal(got, []string{"te-1"}) {
		t.Fatalf("members once the registration was answered = %v, want [te-1]", got)
	}
	// Silent: dropped after the heartbeat timeout, then removed after the
	// lease.
	for rm.Overview().TaskExecutors != 0 {
		if ctx.Err() != nil {
			t.Fatal("the silent TaskExecutor was never dropped")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := members(); !slices.Equal(got, []string{"te-1"}) {
		t.Fatalf("members as the silent TaskExecutor was dropped = %v; want it kept until its lease has ended", got)
	}
	for len(members()) != 0 {
		if ctx.Err() != nil {
			t.Fatal("the gone TaskExecutor was never removed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if d := time.Since(before); d < lease {
		t.Fatalf("removed %v after it registered; want no sooner than its lease (%v) after it was last heard", d, lease)
	}
	registerTaskExecutor(ctx, t, rm, token)
	stop()
	if got := members(); !slices.Equal(got, []string{"te-1"}) {
		t.Fatalf("members after registering again = %v, want [te-1]", got)
	}
	next, _, stopNext := lead()
	defer stopNext()
	for {
		m, ok := next.Members()
		if ok {
			if addr, in := m["te-1"]; !in || addr != "" || len(m) != 1 {
				t.Fatalf("the new leader's members = %v; want te-1, with no address before it registers", m)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the new leader never read the members")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A remote store without the membership calls (HAStoreService before
// 1.2) answers them UNIMPLEMENTED: TaskExecutors still register, and the
// ResourceManager goes on without a membership (its JobMasters wait out
// the task lease for what no TaskExecutor lists).
func TestStoreWithoutMembership(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store, quiet := openStore(ctx, t)
	// Served without its membership: only hastore.Store's methods.
	mux := http.NewServeMux()
	mux.Handle(hastorerpc.NewHandler(hastorerpc.HandlerConfig{Store: struct{ hastore.Store }{store}, Logger: quiet}).Path())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	remote := hastorerpc.NewClient(hastorerpc.ClientConfig{HTTPClient: srv.Client(), BaseURL: srv.URL, Logger: quiet})
	if _, err := remote.TaskExecutors(ctx); !errors.Is(err, hastore.ErrMembersUnsupported) {
		t.Fatalf("TaskExecutors of a store without the calls: %v, want ErrMembersUnsupported", err)
	}
	sess, err := remote.OpenSession(ctx, hastore.SessionConfig{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sess.Close(context.Background()) })
	l, err := sess.Campaign(ctx, election.JobManager, "")
	if err != nil {
		t.Fatal(err)
	}
	rm, err := New(Config{HTTPClient: http.DefaultClient, HeartbeatInterval: 50 * time.Millisecond, HeartbeatTimeout: 200 * time.Millisecond,
		Logger: quiet, Members: remote, TaskLease: time.Second, Elections: remote})
	if err != nil {
		t.Fatal(err)
	}
	lctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = rm.Lead(lctx, l) }()
	defer func() { stop(); <-done }()
	registerTaskExecutor(ctx, t, rm, l.Token())
	if m, ok := rm.Members(); ok {
		t.Errorf("Members() = %v, true on a store without a membership; want false", m)
	}
}

// registerTaskExecutor registers TaskExecutor te-1 with rm under token,
// trying again until rm leads; it fails the test if ctx ends first.
func registerTaskExecutor(ctx context.Context, t *testing.T, rm *ResourceManager, token election.Token) {
	t.Helper()
	for {
		_, err := rm.Local().RegisterTaskExecutor(ctx, &clusterv1.ResourceManagerServiceRegisterTaskExecutorRequest{
			TaskExecutorId: "te-1", Address: "http://127.0.0.1:1", ResourceManagerToken: &jobplanev1.FencingToken{SessionId: token.SessionID, Epoch: token.Epoch},
		})
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("RegisterTaskExecutor: %v", err)
		}
		time.Sleep(10 * time.Millisecond) // until it leads
	}
}

// openStore opens an embedded etcd store on a fresh directory, closed
// with the test, and returns it with a logger that drops everything.
func openStore(ctx context.Context, t *testing.T) (*etcdstore.Store, *slog.Logger) {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	store, err := etcdstore.Open(ctx, etcdstore.OpenConfig{DataDir: t.TempDir(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return store, quiet
}

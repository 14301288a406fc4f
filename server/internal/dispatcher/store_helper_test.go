package dispatcher_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/hastore/etcdstore"
)

// quietLogger discards every line.
func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// openStore opens an etcd store on an embedded member of the test's own,
// and a session on it with a 5 s TTL; both are closed with t.
func openStore(ctx context.Context, t *testing.T) (*etcdstore.Store, hastore.Session) {
	t.Helper()
	store, err := etcdstore.Open(ctx, etcdstore.OpenConfig{DataDir: t.TempDir(), Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	sess, err := store.OpenSession(ctx, hastore.SessionConfig{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close(context.Background()) })
	return store, sess
}

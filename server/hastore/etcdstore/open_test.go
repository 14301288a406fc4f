package etcdstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/hastore/etcdstore"
)

// A store on an embedded member talks to it in-process. It closes
// without an error, and a call whose context ends fails with the
// context's error, not as the store being unavailable.
func TestOpenEmbedded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store, err := etcdstore.Open(ctx, etcdstore.OpenConfig{DataDir: t.TempDir(), Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	sess, err := store.OpenSession(ctx, hastore.SessionConfig{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sess.Campaign(ctx, election.Job("open"), "http://a"); err != nil {
		t.Fatal(err)
	}
	ended, stop := context.WithCancel(ctx)
	stop()
	if _, err := store.OpenSession(ended, hastore.SessionConfig{TTL: 10 * time.Second}); !errors.Is(err, context.Canceled) || errors.Is(err, hastore.ErrUnavailable) {
		t.Errorf("OpenSession with an ended context: %v, want context.Canceled", err)
	}
	if err := sess.Close(ended); !errors.Is(err, context.Canceled) || errors.Is(err, hastore.ErrUnavailable) {
		t.Errorf("Session.Close with an ended context: %v, want context.Canceled", err)
	}
	if err := store.Close(); err != nil {
		t.Errorf("Close: %v, want nil", err)
	}
}

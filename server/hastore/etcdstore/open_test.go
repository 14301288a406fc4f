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

// A store reopened on the data directory of a process that ended without
// closing its sessions (as a SIGKILL leaves them) ends those sessions at
// once: its own leaderships are free without waiting for their TTL.
// Sessions served to other processes (ManualKeepAlive) are theirs, and
// stay.
func TestReopenEndsThePredecessorsSessions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()
	first, err := etcdstore.Open(ctx, etcdstore.OpenConfig{DataDir: dir, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	lead := func(store *etcdstore.Store, cfg hastore.SessionConfig, name string) {
		t.Helper()
		sess, err := store.OpenSession(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sess.Campaign(ctx, name, "http://a"); err != nil {
			t.Fatal(err)
		}
	}
	lead(first, hastore.SessionConfig{TTL: time.Minute}, election.Job("own"))
	lead(first, hastore.SessionConfig{TTL: time.Minute, ManualKeepAlive: true}, election.Job("served"))
	// The sessions are left open: their leases outlive the store.
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	second, err := etcdstore.Open(ctx, etcdstore.OpenConfig{DataDir: dir, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	if info, err := second.Leader(ctx, election.Job("own")); err != nil || !info.Token.IsZero() {
		t.Errorf("leader of the dead process's election after the reopen: %+v, %v; expected none: its session revoked", info, err)
	}
	if info, err := second.Leader(ctx, election.Job("served")); err != nil || info.Token.IsZero() {
		t.Errorf("leader of the served session's election after the reopen: %+v, %v; expected it kept: that session is another process's", info, err)
	}
}

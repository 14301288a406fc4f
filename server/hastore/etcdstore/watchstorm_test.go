package etcdstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/hastore/etcdstore"
)

// Many observations of a changing election ended at once (a storm of
// watch cancellations, as when hundreds of TaskExecutors' streams end
// together) leave a store on an embedded member working: a new
// observation still sees the next change, and the store closes. etcd's
// in-process client deadlocks its watch stream with the server under
// such a storm (etcd-io/etcd#18879, #20716), after which no watch of the
// process hears anything again; the store's watches go over gRPC on the
// member's own listener instead.
func TestWatchCancellationStormLeavesWatchesWorking(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	store, err := etcdstore.Open(ctx, etcdstore.OpenConfig{DataDir: t.TempDir(), Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			// Not waited for: a store whose watches are stuck never
			// closes, and the failure is already told.
			go store.Close()
		}
	}()
	name := election.Job("storm")
	sess, err := store.OpenSession(ctx, hastore.SessionConfig{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}

	// Rounds of observers that each read the leader's changes, while the
	// leadership changes under them, all canceled at once.
	const rounds, observers = 20, 300
	for round := range rounds {
		octx, stop := context.WithCancel(ctx)
		var started, done sync.WaitGroup
		for range observers {
			started.Add(1)
			done.Add(1)
			go func() {
				defer done.Done()
				first := true
				_ = store.ObserveLeader(octx, name, func(election.Leader) error {
					if first {
						first = false
						started.Done()
					}
					return nil
				})
				if first {
					started.Done()
				}
			}()
		}
		waitOrFail(t, &started, "observers to hear the leader")
		for i := range 5 {
			l, err := sess.Campaign(ctx, name, fmt.Sprintf("http://round-%d-%d", round, i))
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Resign(ctx); err != nil {
				t.Fatal(err)
			}
		}
		stop()
		waitOrFail(t, &done, "canceled observations to end")
	}

	// A new observation hears the next leader.
	heard := make(chan string, 16)
	octx, stop := context.WithCancel(ctx)
	defer stop()
	go store.ObserveLeader(octx, name, func(l election.Leader) error {
		heard <- l.Address
		return nil
	})
	if _, err := sess.Campaign(ctx, name, "http://after-the-storm"); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(30 * time.Second)
	for got := ""; got != "http://after-the-storm"; {
		select {
		case got = <-heard:
		case <-deadline:
			t.Fatalf("no observation heard the leader campaigned after the storm in 30 s (last heard %q): the store's watches are stuck", got)
		}
	}
	stop()

	// And the store closes.
	closedc := make(chan error, 1)
	go func() { closedc <- store.Close() }()
	closed = true
	select {
	case err := <-closedc:
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("Close: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the store did not close within 30 s: its watch goroutines are stuck")
	}
}

// waitOrFail waits for wg, failing t if that takes 30 s: what waits is
// stuck.
func waitOrFail(t *testing.T, wg *sync.WaitGroup, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("waited 30 s for %s: the store's watches are stuck", what)
	}
}

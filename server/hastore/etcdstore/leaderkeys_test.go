package etcdstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/hastore/etcdmember"
)

// Leaderships end when their key is deleted behind their back, each on
// its own: of many leaderships of one session, those whose key is deleted
// end with ErrLeaderDeleted, and the others hold. The store watches all of
// them with one watch.
func TestEtcdLeaderKeyDeletedEndsOnlyThatLeadership(t *testing.T) {
	t.Parallel()
	e := startEmbedded(t, etcdmember.Config{})
	s := e.store(t, "/gone/")
	raw := e.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sess, err := s.OpenSession(ctx, hastore.SessionConfig{TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close(context.Background())
	const jobs = 40
	leaders := make([]*hastore.Leadership, jobs)
	for i := range leaders {
		if leaders[i], err = sess.Campaign(ctx, election.Job(fmt.Sprintf("j%d", i)), "http://a"); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < jobs; i += 2 {
		key := fmt.Sprintf("/gone/elections/%s/%s", election.Job(fmt.Sprintf("j%d", i)), sess.ID())
		if resp, err := raw.Delete(ctx, key); err != nil || resp.Deleted != 1 {
			t.Fatalf("delete %s: %v, %v", key, resp, err)
		}
	}
	for i := 0; i < jobs; i += 2 {
		select {
		case <-leaders[i].Done():
			if cause := context.Cause(leaders[i].Context()); !errors.Is(cause, hastore.ErrLeaderDeleted) {
				t.Errorf("leadership %d ended with %v, want ErrLeaderDeleted", i, cause)
			}
		case <-ctx.Done():
			t.Fatalf("leadership %d still held after its key was deleted", i)
		}
	}
	// The deletions were all seen; none ended a leadership whose key is
	// still there.
	for i := 1; i < jobs; i += 2 {
		if leaders[i].Context().Err() != nil || !leaders[i].Valid() {
			t.Errorf("leadership %d ended (%v), but its key was not deleted", i, context.Cause(leaders[i].Context()))
		}
	}
}

// The deletion of an earlier candidacy of the same session in the same
// election (the same key) never ends the candidacy that replaced it,
// however late the store's watch reports it.
func TestEtcdEarlierIncarnationDeletionIgnored(t *testing.T) {
	t.Parallel()
	e := startEmbedded(t, etcdmember.Config{})
	s := e.store(t, "/again/")
	raw := e.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sess, err := s.OpenSession(ctx, hastore.SessionConfig{TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close(context.Background())
	name := election.Job("again")
	var l *hastore.Leadership
	for range 50 {
		if l, err = sess.Campaign(ctx, name, "http://a"); err != nil {
			t.Fatal(err)
		}
		if err := l.Resign(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if l, err = sess.Campaign(ctx, name, "http://a"); err != nil {
		t.Fatal(err)
	}
	// A deletion made after all the resignations, seen once the watch has
	// reported everything before it.
	marker, err := sess.Campaign(ctx, election.Job("marker"), "http://a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Delete(ctx, fmt.Sprintf("/again/elections/%s/%s", election.Job("marker"), sess.ID())); err != nil {
		t.Fatal(err)
	}
	select {
	case <-marker.Done():
	case <-ctx.Done():
		t.Fatal("the marker's deletion was never seen")
	}
	if l.Context().Err() != nil {
		t.Fatalf("the last candidacy ended (%v): an earlier candidacy's deletion was taken for its own", context.Cause(l.Context()))
	}
}

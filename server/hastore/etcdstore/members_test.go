package etcdstore_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/hastore/etcdmember"
)

// The TaskExecutor membership is written only under the jobmanager
// leader's token: a deposed leader's add or remove changes nothing, a job
// election's token and a bad id are refused as invalid; the list holds
// what the leaders recorded, in id order, across a restart of the store.
func TestMembersAreFencedAndDurable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := startEmbedded(t, etcdmember.Config{})
	s := e.store(t, "")
	lead := func() *hastore.Leadership {
		t.Helper()
		sess, err := s.OpenSession(ctx, hastore.SessionConfig{TTL: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sess.Close(context.Background()) })
		l, err := sess.Campaign(ctx, election.JobManager, "")
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	old := lead()
	for _, id := range []string{"te-b", "te-a", "te-c"} {
		if err := s.AddTaskExecutor(ctx, old.Fence(), id); err != nil {
			t.Fatalf("AddTaskExecutor %s: %v", id, err)
		}
	}
	if err := s.AddTaskExecutor(ctx, old.Fence(), "te-a"); err != nil {
		t.Fatalf("AddTaskExecutor again: %v", err)
	}
	if err := s.Resign(ctx, old.Fence()); err != nil {
		t.Fatal(err)
	}
	current := lead()
	if err := s.AddTaskExecutor(ctx, old.Fence(), "te-x"); !errors.Is(err, hastore.ErrStaleToken) {
		t.Fatalf("AddTaskExecutor under a resigned token: %v, want ErrStaleToken", err)
	}
	if err := s.RemoveTaskExecutor(ctx, old.Fence(), "te-a"); !errors.Is(err, hastore.ErrStaleToken) {
		t.Fatalf("RemoveTaskExecutor under a resigned token: %v, want ErrStaleToken", err)
	}
	job := hastore.Fence{Election: election.Job("j"), Token: current.Token()}
	if err := s.AddTaskExecutor(ctx, job, "te-x"); !errors.Is(err, hastore.ErrInvalidArgument) {
		t.Fatalf("AddTaskExecutor fenced by a job election: %v, want ErrInvalidArgument", err)
	}
	if err := s.AddTaskExecutor(ctx, current.Fence(), ""); !errors.Is(err, hastore.ErrInvalidArgument) {
		t.Fatalf("AddTaskExecutor of an empty id: %v, want ErrInvalidArgument", err)
	}
	if err := s.RemoveTaskExecutor(ctx, current.Fence(), "te-b"); err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveTaskExecutor(ctx, current.Fence(), "te-absent"); err != nil {
		t.Fatalf("RemoveTaskExecutor of an absent id: %v", err)
	}
	e.restart(t)
	got, err := e.store(t, "").TaskExecutors(ctx)
	if want := []string{"te-a", "te-c"}; err != nil || !slices.Equal(got, want) {
		t.Fatalf("TaskExecutors after a restart = %v, %v; want %v", got, err, want)
	}
}

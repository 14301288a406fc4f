package storetest

import (
	"slices"
	"strings"

	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/server/hastore"
)

// testTaskExecutorMembership checks the TaskExecutor membership
// (hastore.Members): fenced by the jobmanager election like plans, adds
// and removes idempotent, listed in id order to any client, and durable.
func testTaskExecutorMembership(t T, b *Backend) {
	s := open(t, b)
	m := membersOf(t, s)
	ctx := ctxFor(t)
	old := campaign(t, session(t, s, hastore.SessionConfig{}), election.JobManager, "")
	for _, id := range []string{"te-b", "te-a", "te-c", "te-a"} {
		if err := m.AddTaskExecutor(ctx, old.Fence(), id); err != nil {
			t.Fatalf("AddTaskExecutor %s: %v", id, err)
		}
	}
	list := func(what string, m hastore.Members, want ...string) {
		t.Helper()
		got, err := m.TaskExecutors(ctx)
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("TaskExecutors %s = %v, %v; want %v", what, got, err, want)
		}
	}
	list("after adding te-b, te-a, te-c and te-a again", m, "te-a", "te-b", "te-c")
	must(t, old.Resign(ctx))
	current := campaign(t, session(t, s, hastore.SessionConfig{}), election.JobManager, "")
	wantErr(t, "AddTaskExecutor under a resigned token", m.AddTaskExecutor(ctx, old.Fence(), "te-x"), hastore.ErrStaleToken)
	wantErr(t, "RemoveTaskExecutor under a resigned token", m.RemoveTaskExecutor(ctx, old.Fence(), "te-a"), hastore.ErrStaleToken)
	job := campaign(t, session(t, s, hastore.SessionConfig{}), election.Job("j"), "")
	wantErr(t, "AddTaskExecutor fenced by a job election", m.AddTaskExecutor(ctx, job.Fence(), "te-x"), hastore.ErrInvalidArgument)
	wantErr(t, "RemoveTaskExecutor fenced by a job election", m.RemoveTaskExecutor(ctx, job.Fence(), "te-a"), hastore.ErrInvalidArgument)
	wantErr(t, "AddTaskExecutor of an empty id", m.AddTaskExecutor(ctx, current.Fence(), ""), hastore.ErrInvalidArgument)
	wantErr(t, "AddTaskExecutor of a 129-byte id", m.AddTaskExecutor(ctx, current.Fence(), strings.Repeat("t", hastore.MaxTaskExecutorIDLength+1)), hastore.ErrInvalidArgument)
	list("after refused writes", m, "te-a", "te-b", "te-c")
	must(t, m.RemoveTaskExecutor(ctx, current.Fence(), "te-b"))
	must(t, m.RemoveTaskExecutor(ctx, current.Fence(), "te-b"))      // idempotent
	must(t, m.RemoveTaskExecutor(ctx, current.Fence(), "te-absent")) // never a member
	list("from another client", membersOf(t, open(t, b)), "te-a", "te-c")
	if b.Restart == nil {
		return
	}
	must(t, current.Resign(ctx))
	must(t, job.Resign(ctx))
	b.Restart(t)
	list("after a restart of the store", membersOf(t, open(t, b)), "te-a", "te-c")
}

// membersOf returns the store's TaskExecutor membership, failing the test
// if it keeps none.
func membersOf(t T, s hastore.Store) hastore.Members {
	t.Helper()
	m, ok := s.(hastore.Members)
	if !ok {
		t.Fatalf("the store keeps no TaskExecutor membership (hastore.Members)")
	}
	return m
}

package resourcemanager

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"

	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
	"github.com/jobplane/jobplane/server/hastore"
)

// TaskExecutor membership (Config.Members): the TaskExecutors that may
// hold an attempt of some job, recorded in the store so that a new leader
// knows every one of them. A TaskExecutor is recorded before its
// registration is answered, so before any JobMaster can deploy there; it
// is removed once it has been gone here for longer than any lease it
// could hold (Config.TaskLease, or the heartbeat timeout without one),
// when whatever it ran has certainly stopped.

// members is one leadership's view of the membership: what the store
// held when it began, and what it recorded and removed since. Its
// fields are guarded by the ResourceManager's mu.
type members struct {
	loaded bool
	// seen is when each member was last known to be here: the start of
	// the leadership for those read from the store, then every expiry
	// tick while it is registered.
	seen map[string]time.Time
	// removing has a channel, closed once the removal ended, for each
	// member being removed: registering it again waits for that, so that
	// the removal never lands after the new record.
	removing map[string]chan struct{}
}

func newMembers() *members {
	return &members{seen: map[string]time.Time{}, removing: map[string]chan struct{}{}}
}

// Members returns the TaskExecutor membership, each id with the address
// it registered with here ("" if it has not registered with this
// leadership), and false while it is not known: no store membership, not
// leading, or not read yet.
func (rm *ResourceManager) Members() (map[string]string, bool) {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	if rm.members == nil || !rm.members.loaded || !rm.leadingLocked() {
		return nil, false
	}
	out := make(map[string]string, len(rm.members.seen))
	for id := range rm.members.seen {
		out[id] = ""
		if e := rm.pool.executors[id]; e != nil {
			out[id] = e.address
		}
	}
	return out, true
}

// loadMembers reads the membership from the store, retrying until it
// succeeds or ctx ends.
func (rm *ResourceManager) loadMembers(ctx context.Context, m *members) {
	for {
		ids, err := rm.cfg.Members.TaskExecutors(ctx)
		if errors.Is(err, hastore.ErrMembersUnsupported) {
			rm.noMembers(m, err)
			return
		}
		if err == nil {
			rm.mu.Lock()
			start := time.Now()
			for _, id := range ids {
				if _, ok := m.seen[id]; !ok {
					m.seen[id] = start
				}
			}
			m.loaded = true
			rm.mu.Unlock()
			rm.log.Info("TaskExecutor membership read", "members", len(ids))
			return
		}
		rm.log.Warn("reading the TaskExecutor membership; trying again", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(rm.cfg.HeartbeatInterval):
		}
	}
}

// record makes TaskExecutor id a member, in the store first, fenced by
// token, unless this leadership knows it is one.
func (rm *ResourceManager) record(ctx context.Context, token election.Token, id string) error {
	if rm.cfg.Members == nil {
		return nil
	}
	rm.mu.Lock()
	m := rm.members
	if m == nil {
		rm.mu.Unlock()
		return nil
	}
	_, known := m.seen[id]
	removal := m.removing[id]
	rm.mu.Unlock()
	if removal != nil {
		select {
		case <-removal:
		case <-ctx.Done():
			return connect.NewError(connect.CodeUnavailable, ctx.Err())
		}
	} else if known {
		return nil
	}
	err := rm.cfg.Members.AddTaskExecutor(ctx, hastore.Fence{Election: election.JobManager, Token: token}, id)
	switch {
	case errors.Is(err, hastore.ErrMembersUnsupported):
		rm.noMembers(m, err)
		return nil
	case errors.Is(err, hastore.ErrStaleToken):
		return apierror.NotLeader(election.JobManager, "")
	case err != nil:
		return connect.NewError(connect.CodeUnavailable, fmt.Errorf("recording the TaskExecutor in the HA store: %w", err))
	}
	rm.mu.Lock()
	defer rm.mu.Unlock()
	if rm.members == m {
		m.seen[id] = time.Now()
	}
	return nil
}

// noMembers gives up the membership m for the rest of its leadership:
// the store keeps none after all (a remote store without the membership
// calls). Its JobMasters then wait out the task lease for what no
// TaskExecutor lists, as without a membership.
func (rm *ResourceManager) noMembers(m *members, err error) {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	if rm.members == m {
		rm.members = nil
		rm.log.Info("the HA store keeps no TaskExecutor membership; adoption waits out the task lease for subtasks not found", "err", err)
	}
}

// expireMembersLocked removes the members gone for longer than any lease
// they could hold; rm.mu must be held.
func (rm *ResourceManager) expireMembersLocked(ctx context.Context, now time.Time, token election.Token) {
	m := rm.members
	if m == nil || !m.loaded {
		return
	}
	gone := max(rm.cfg.TaskLease, rm.cfg.HeartbeatTimeout) + rm.cfg.HeartbeatInterval
	for id, seen := range m.seen {
		switch {
		case rm.pool.executors[id] != nil:
			m.seen[id] = now
		case now.Sub(seen) > gone && m.removing[id] == nil:
			m.removing[id] = make(chan struct{})
			go rm.removeMember(ctx, m, token, id)
		}
	}
}

// removeMember removes a member from the store, then from m.
func (rm *ResourceManager) removeMember(ctx context.Context, m *members, token election.Token, id string) {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := rm.cfg.Members.RemoveTaskExecutor(rctx, hastore.Fence{Election: election.JobManager, Token: token}, id)
	rm.mu.Lock()
	defer rm.mu.Unlock()
	close(m.removing[id])
	delete(m.removing, id)
	if err != nil {
		rm.log.Warn("removing a gone TaskExecutor from the membership", "task_executor", id, "err", err)
		return
	}
	if rm.pool == nil || rm.pool.executors[id] == nil {
		delete(m.seen, id)
		rm.log.Info("TaskExecutor gone past its lease; no longer a member", "task_executor", id)
	}
}

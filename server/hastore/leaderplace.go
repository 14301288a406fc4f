package hastore

import (
	"context"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/types"
)

// A JobManager that embeds a member of a cluster keeps etcd's leadership
// off its own member while it leads the election "jobmanager". Killing
// the process that holds both leaderships costs an etcd election first,
// and the new etcd leader extends every lease by its election timeout:
// the standby would take over an election and more after the session
// TTL. With etcd's leader elsewhere, losing the JobManager leader costs a
// session TTL only. The check runs when etcd's leader changes and when
// this process gains the JobManager leadership: no timer, no polling.

// placeEtcdLeader moves etcd's leadership to another started voting
// member whenever this process leads the election "jobmanager" and its
// member m leads etcd, until ctx ends. A transfer that fails (the other
// members are down, say) is tried again a second later, while the
// conditions hold.
func (s *Etcd) placeEtcdLeader(ctx context.Context, m *Member) {
	srv := m.etcd.Server
	retry := (<-chan time.Time)(nil)
	for {
		changed := srv.LeaderChangedNotify()
		retry = nil
		if srv.Leader() == srv.MemberID() && s.leadsJobManager() {
			if to := otherVoter(m); to != 0 {
				tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				err := srv.MoveLeader(tctx, uint64(srv.MemberID()), uint64(to))
				cancel()
				if err != nil && ctx.Err() == nil {
					s.log.Warn("moving etcd's leadership off the JobManager leader's member failed; trying again", "to", to.String(), "err", err)
					retry = time.After(time.Second)
				} else if err == nil {
					s.log.Info("moved etcd's leadership off the JobManager leader's member", "to", to.String())
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-s.jobManagerLed:
		case <-retry:
		}
	}
}

// otherVoter returns a started voting member of m's cluster other than m,
// or 0 if there is none.
func otherVoter(m *Member) types.ID {
	srv := m.etcd.Server
	for _, mem := range srv.Cluster().Members() {
		if mem.ID != srv.MemberID() && !mem.IsLearner && mem.Name != "" {
			return mem.ID
		}
	}
	return 0
}

// leadsJobManager reports whether a leadership of the election
// "jobmanager" is held through this store.
func (s *Etcd) leadsJobManager() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for f := range s.leaders {
		if f.Election == ElectionJobManager {
			return true
		}
	}
	return false
}

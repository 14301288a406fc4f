package etcdstore

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/types"

	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/server/hastore/etcdmember"
)

// Leader placement lives here, with the store, rather than with the
// member: it acts when the store grants the JobManager leadership, and it
// needs the member only through what the member exports (its etcd server
// and its configuration). The store's package imports the member's (Open
// starts one), never the other way round, so the dependency stays
// one-way: etcdstore -> etcdmember, and the member knows nothing of
// elections, plans or the store.

// A JobManager that embeds a member of a cluster keeps etcd's leadership
// off its own member while it leads the election "jobmanager". Killing
// the process that holds both leaderships costs an etcd election first,
// and the new etcd leader extends every lease by its election timeout:
// the standby would take over an election and more after the session
// TTL. With etcd's leader elsewhere, losing the JobManager leader costs a
// session TTL only. The check runs when etcd's leader changes and when
// this process gains the JobManager leadership: no timer, no polling.

// placeEtcdLeader moves etcd's leadership to another voting member
// whenever this process leads the election "jobmanager" and its member m
// leads etcd, until ctx ends. The transferee is a member that answers and
// follows m, the one with the longest log, so that the transfer, during
// which etcd drops new proposals, is short and does not wait on a member
// that is down; if none answers, or the transfer fails, it is tried again
// a second later while the conditions hold. The store's own writes retry
// a dropped proposal (retryDropped).
func (s *Store) placeEtcdLeader(ctx context.Context, m *etcdmember.Member) {
	srv := m.Server()
	for {
		changed := srv.LeaderChangedNotify()
		var retry <-chan time.Time
		if srv.Leader() == srv.MemberID() && s.leadsJobManager() {
			to := s.transferee(ctx, m)
			err := errNoTransferee
			if to != 0 {
				tctx, cancel := context.WithTimeout(ctx, 2*m.Config().ElectionTimeout)
				err = srv.MoveLeader(tctx, uint64(srv.MemberID()), uint64(to))
				cancel()
			}
			switch {
			case ctx.Err() != nil:
				return
			case err != nil:
				s.log.Warn("moving etcd's leadership off the JobManager leader's member failed; trying again", "to", to.String(), "err", err)
				retry = time.After(time.Second)
			default:
				s.log.Info("moved etcd's leadership off the JobManager leader's member", "to", to.String())
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

var errNoTransferee = errors.New("no other voting member answers and follows this one")

// transferee returns the voting member, other than m, that answers a
// status request within a heartbeat's time or so, follows m, and has the
// longest log; or 0 if there is none.
func (s *Store) transferee(ctx context.Context, m *etcdmember.Member) types.ID {
	srv := m.Server()
	var (
		best  types.ID
		index uint64
	)
	for _, mem := range srv.Cluster().Members() {
		if mem.ID == srv.MemberID() || mem.IsLearner || len(mem.ClientURLs) == 0 {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, statusTimeout(m))
		st, err := s.client.Status(sctx, mem.ClientURLs[0])
		cancel()
		if err != nil || st.Leader != uint64(srv.MemberID()) {
			continue
		}
		if best == 0 || st.RaftIndex > index {
			best, index = mem.ID, st.RaftIndex
		}
	}
	return best
}

// statusTimeout bounds a member's status request: a live member on a
// sound network answers well within an election timeout.
func statusTimeout(m *etcdmember.Member) time.Duration { return m.Config().ElectionTimeout / 2 }

// leadsJobManager reports whether a leadership of the election
// "jobmanager" is held through this store.
func (s *Store) leadsJobManager() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for f := range s.leaders {
		if f.Election == election.JobManager {
			return true
		}
	}
	return false
}

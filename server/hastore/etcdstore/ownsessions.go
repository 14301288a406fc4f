package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/jobplane/jobplane/server/internal/atomicfile"
)

// SessionsFileName is the file in an embedded member's data directory
// that lists the leases of the sessions the process opened for its own
// use (not those it serves to others with ManualKeepAlive).
//
// A process restarted on the directory holds its lock, which proves that
// the process before it is gone: the sessions listed are of a dead
// process, and Open revokes them at once instead of leaving their
// leaderships to their TTL. etcd restores a lease with a fresh TTL when a
// member restarts, so without this a restarted standalone would wait a
// whole TTL for its own dead predecessor's leaderships.
const SessionsFileName = "jobplane-sessions"

// ownSessions keeps SessionsFileName up to date with the live sessions.
type ownSessions struct {
	path string

	mu   sync.Mutex
	live []clientv3.LeaseID
}

// add records a session before it is used: it is written to the file
// before any leadership can be held under it.
func (o *ownSessions) add(id clientv3.LeaseID) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.live = append(o.live, id)
	return o.writeLocked()
}

// remove forgets an ended session.
func (o *ownSessions) remove(id clientv3.LeaseID) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if i := slices.Index(o.live, id); i >= 0 {
		o.live = slices.Delete(o.live, i, i+1)
		_ = o.writeLocked() // a stale entry only costs a refused revocation
	}
}

// writeLocked replaces the file, atomically and durably.
func (o *ownSessions) writeLocked() error {
	var b strings.Builder
	for _, id := range o.live {
		fmt.Fprintf(&b, "%x\n", int64(id))
	}
	return atomicfile.Write(o.path, []byte(b.String()), 0o600)
}

// revokePredecessors revokes the sessions s.own's file lists, which are
// the previous process's (the caller holds the directory's lock), and
// empties the file. It gives up on a lease etcd cannot revoke in time:
// that one expires by its TTL.
func (s *Store) revokePredecessors(ctx context.Context) {
	b, err := os.ReadFile(s.own.path)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			s.log.Warn("cannot read the sessions of the data directory's previous process; their leaderships end with their TTL", "file", s.own.path, "err", err)
		}
		return
	}
	revoked := 0
	for _, line := range strings.Fields(string(b)) {
		id, err := strconv.ParseInt(line, 16, 64)
		if err != nil {
			s.log.Warn("skipping a malformed line of the sessions file", "file", s.own.path, "line", line)
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, cleanupTimeout)
		_, err = s.client.Revoke(rctx, clientv3.LeaseID(id))
		cancel()
		switch {
		case err == nil:
			revoked++
		case !errors.Is(err, rpctypes.ErrLeaseNotFound):
			s.log.Warn("cannot revoke the previous process's session; its leaderships end with its TTL", "session", line, "err", err)
		}
	}
	if revoked > 0 {
		s.log.Info("ended the sessions of the process that held this data directory before", "sessions", revoked)
	}
	s.own.mu.Lock()
	defer s.own.mu.Unlock()
	if err := s.own.writeLocked(); err != nil {
		s.log.Warn("cannot empty the sessions file", "file", s.own.path, "err", err)
	}
}

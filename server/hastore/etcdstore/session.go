package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/server/hastore"
)

// OpenSession implements hastore.Store: a session is an etcd lease that the
// session renews itself every sixth of its TTL. Each acknowledged renewal
// moves ValidUntil to the renewal's send time plus the TTL, less a tenth
// for clock drift; once that instant passes without a newer renewal, the
// session ends, and so do its leaderships. With ManualKeepAlive the lease
// is also revoked TTL after the last KeepAlive.
func (s *Store) OpenSession(ctx context.Context, cfg hastore.SessionConfig) (hastore.Session, error) {
	if err := hastore.ValidateSessionConfig(cfg); err != nil {
		return nil, err
	}
	ttlSeconds := int64(math.Ceil(cfg.TTL.Seconds()))
	// A grant answered after the TTL would be of no use (the session's
	// validity counts from the send time), and etcd answers a grant that
	// a member forwarded to a leader that dropped it (see leaderplace.go)
	// only at its request timeout, 6s: the attempt is bounded by the TTL.
	var sent time.Time
	gctx, cancel := context.WithTimeout(ctx, time.Duration(ttlSeconds)*time.Second)
	grant, err := retryDropped(gctx, func() (*clientv3.LeaseGrantResponse, error) {
		sent = time.Now()
		return s.client.Grant(gctx, ttlSeconds)
	})
	timedOut := gctx.Err() != nil && ctx.Err() == nil
	cancel()
	switch {
	case err != nil && timedOut:
		return nil, fmt.Errorf("%w: etcd did not answer a lease grant within the TTL, %ds", hastore.ErrUnavailable, ttlSeconds)
	case err != nil:
		return nil, unavailable(ctx, err)
	}
	// The session renews the lease itself (see renew), rather than on
	// etcd's keep-alive stream, whose send times the client keeps to
	// itself: a leader must know how long its lease certainly holds.
	sctx, end := context.WithCancelCause(context.Background())
	sess := &etcdSession{
		store:       s,
		lease:       grant.ID,
		ttl:         time.Duration(grant.TTL) * time.Second,
		ctx:         sctx,
		end:         end,
		candidacies: make(map[string]bool),
	}
	if own := s.own; own != nil && !cfg.ManualKeepAlive {
		if err := own.add(grant.ID); err != nil {
			s.log.Warn("cannot record the session in the data directory; a restart on it will wait for the session's TTL", "file", own.path, "err", err)
		}
	}
	sess.validity = hastore.NewValidity(sent, sess.ttl, sess.lapsed)
	context.AfterFunc(sctx, sess.validity.Stop)
	go sess.renew()
	if cfg.ManualKeepAlive {
		sess.expiry = time.AfterFunc(sess.ttl, sess.expire)
		s.mu.Lock()
		s.manual[sess] = struct{}{}
		s.mu.Unlock()
	}
	return sess, nil
}

type etcdSession struct {
	store *Store
	lease clientv3.LeaseID
	ttl   time.Duration

	ctx context.Context // ends when the session ends
	end context.CancelCauseFunc

	validity *hastore.Validity // until when the lease certainly holds

	mu          sync.Mutex
	candidacies map[string]bool // elections with a candidacy or leadership
	expiry      *time.Timer     // ManualKeepAlive only
	closed      bool
}

// cleanupTimeout bounds the store calls that clean up after a failure, so
// that an unreachable etcd cannot hold them forever.
const cleanupTimeout = 5 * time.Second

func (s *etcdSession) ID() string            { return fmt.Sprintf("%x", int64(s.lease)) }
func (s *etcdSession) TTL() time.Duration    { return s.ttl }
func (s *etcdSession) Done() <-chan struct{} { return s.ctx.Done() }

func (s *etcdSession) ValidUntil() time.Time {
	if s.ctx.Err() != nil {
		return time.Time{}
	}
	return s.validity.Until()
}

func (s *etcdSession) ended() bool { return s.ctx.Err() != nil }

// renew renews the lease every sixth of the TTL until the session ends,
// retrying failed renewals sooner; the lapse timer ends the session if
// none succeeds in time. Frequent renewals keep the leader's validity
// (which its TaskExecutors use as a deadline for its tasks) well ahead of
// now on a loaded machine, where a renewal may take hundreds of
// milliseconds; they cost one small etcd call each.
//
// A renewal is waited for until the session would lapse, not just until
// the next one is due: an answer is as good late as early (the validity
// counts from its send time), and on a machine whose cores a takeover of
// 100,000 jobs keeps busy, renewals took longer than the interval, each
// was given up, and the session lapsed with etcd renewing the lease all
// along (issue 33). The next renewal still leaves on time, beside the one
// in flight (renewalsInFlight at most), so that one lost request, or a
// member that stopped answering, costs no more than before.
func (s *etcdSession) renew() {
	interval := max(s.ttl/6, 10*time.Millisecond)
	retry := max(interval/10, 10*time.Millisecond)
	timer := time.NewTimer(interval)
	defer timer.Stop()
	type renewal struct {
		sent time.Time
		ttl  time.Duration
		err  error
	}
	answers := make(chan renewal, renewalsInFlight)
	inFlight := 0
	failing := false // the last renewal failed
	for {
		select {
		case <-s.ctx.Done():
			return // the renewals in flight end with s.ctx
		case <-s.store.client.Ctx().Done():
			// The client closed with the store: the lease expires by its TTL.
			s.end(hastore.ErrSessionEnded)
			return
		case a := <-answers:
			inFlight--
			switch {
			case a.err == nil:
				s.validity.Renewed(a.sent, a.ttl)
				failing = false
			case errors.Is(a.err, rpctypes.ErrLeaseNotFound):
				s.end(hastore.ErrSessionEnded)
				return
			case s.ctx.Err() == nil:
				// The first failure of a run says why; the retries that
				// follow it, every tenth of the interval, do not.
				level := slog.LevelDebug
				if !failing {
					level = slog.LevelWarn
				}
				s.store.log.Log(context.Background(), level, "session renewal failed; retrying", "session", s.ID(), "took", time.Since(a.sent).Round(time.Millisecond),
					"valid_for", time.Until(s.validity.Until()).Round(time.Millisecond), "err", a.err)
				failing = true
				timer.Reset(retry)
			}
			continue
		case <-timer.C:
		}
		if inFlight == renewalsInFlight {
			timer.Reset(retry)
			continue
		}
		inFlight++
		sent := time.Now()
		wait := max(time.Until(s.validity.Until()), interval)
		go func() {
			ctx, cancel := context.WithTimeout(s.ctx, wait)
			defer cancel()
			resp, err := s.store.client.KeepAliveOnce(ctx, s.lease)
			a := renewal{sent: sent, err: err}
			if err == nil {
				a.ttl = time.Duration(resp.TTL) * time.Second
			}
			answers <- a
		}()
		if failing {
			timer.Reset(retry)
		} else {
			timer.Reset(interval)
		}
	}
}

// renewalsInFlight bounds the renewals of a session sent and not yet
// answered.
const renewalsInFlight = 3

// lapsed ends the session once its lease may have expired: no renewal was
// acknowledged in time. It revokes the lease, best effort, so that a
// lease that did survive frees its elections at once.
func (s *etcdSession) lapsed() {
	if s.ctx.Err() != nil {
		return // over anyway
	}
	s.store.log.Warn("session lease not renewed in time; ending the session", "session", s.ID(), "ttl", s.ttl)
	s.end(hastore.ErrSessionEnded)
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	_, _ = s.store.client.Revoke(ctx, s.lease)
}

// expire ends a manually renewed session whose TTL passed.
func (s *etcdSession) expire() {
	ctx, cancel := context.WithTimeout(context.Background(), s.ttl)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		s.store.log.Warn("revoking expired session", "session", s.ID(), "err", err)
	}
}

func (s *etcdSession) KeepAlive(ctx context.Context) (time.Duration, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.ended() {
		return 0, hastore.ErrSessionNotFound
	}
	if s.expiry != nil && !s.expiry.Reset(s.ttl) {
		s.expiry.Stop()
		// The timer fired: the session is being revoked.
		return 0, hastore.ErrSessionNotFound
	}
	return s.ttl, nil
}

func (s *etcdSession) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	if s.expiry != nil {
		s.expiry.Stop()
	}
	s.mu.Unlock()
	s.store.mu.Lock()
	delete(s.store.manual, s)
	s.store.mu.Unlock()
	// Revoke before ending, so that once the session reports Done its
	// keys are gone from the store.
	_, err := s.store.client.Revoke(ctx, s.lease)
	s.end(hastore.ErrSessionEnded)
	if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return unavailable(ctx, err)
	}
	if s.store.own != nil {
		s.store.own.remove(s.lease) // gone: nothing left to revoke after a restart
	}
	return nil
}

func (s *etcdSession) Campaign(ctx context.Context, election, address string) (*hastore.Leadership, error) {
	if err := hastore.ValidateCampaign(election, address); err != nil {
		return nil, err
	}
	release, err := s.reserve(election)
	if err != nil {
		return nil, err
	}
	l, err := s.campaign(ctx, election, address, release)
	if err != nil {
		release()
		return nil, err
	}
	return l, nil
}

// reserve records the session's candidacy in election, which it may
// have only one of, and returns what frees it.
func (s *etcdSession) reserve(election string) (release func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.ended():
		return nil, hastore.ErrSessionNotFound
	case s.candidacies[election]:
		return nil, hastore.ErrCandidacyExists
	}
	s.candidacies[election] = true
	return func() {
		s.mu.Lock()
		delete(s.candidacies, election)
		s.mu.Unlock()
	}, nil
}

func (s *etcdSession) campaign(ctx context.Context, election, address string, release func()) (*hastore.Leadership, error) {
	store := s.store
	// The campaign also stops when the session ends.
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.ctx, cancel)()

	// etcd's election recipe (as in its concurrency package): the
	// candidacy is a key under the election's prefix, on the session's
	// lease, and it leads once no older key is left. The store's watch of
	// leader keys learns of the key's deletion from before its creation.
	key := store.leaderKey(election, s.ID())
	reg := store.gone.register(key)
	led := false
	defer func() {
		if !led {
			store.gone.unregister(reg)
		}
	}()
	rev, leads, err := s.enter(cctx, election, key, address)
	if err == nil && !leads {
		err = store.waitPredecessors(cctx, store.electionPrefix(election)+"/", rev)
	}
	if err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return nil, hastore.ErrSessionNotFound
		}
		// The candidacy's key may be left behind (a withdrawn or broken
		// wait, or a transaction applied although its answer was lost);
		// remove it, or it would lead one day with no one holding the
		// leadership.
		s.deleteKey(key)
		switch {
		case s.ended():
			return nil, hastore.ErrSessionNotFound
		case ctx.Err() != nil:
			return nil, ctx.Err()
		}
		return nil, unavailable(ctx, err)
	}
	if !leads {
		// The session may have ended while waiting, deleting the
		// candidacy: only a key that still exists with its create
		// revision leads.
		got, err := store.client.Get(ctx, key)
		if err != nil {
			s.deleteKey(key)
			return nil, unavailable(ctx, err)
		}
		if len(got.Kvs) == 0 || got.Kvs[0].CreateRevision != rev {
			return nil, hastore.ErrSessionNotFound
		}
	}
	led = true
	return s.lead(election, rev, reg, release), nil
}

// lead returns the leadership of the session's candidacy in election,
// created at revision rev (its epoch), whose key reg watches. Ending it
// frees the candidacy (release).
func (s *etcdSession) lead(name string, rev int64, reg *keyReg, release func()) *hastore.Leadership {
	store := s.store
	f := hastore.Fence{Election: name, Token: election.Token{SessionID: s.ID(), Epoch: uint64(rev)}}
	// However the leadership ends (its session ends, Resign, or its key
	// is deleted), ending it also frees the session's candidacy at once,
	// so that a resigned leader may campaign again right away.
	l, end := hastore.NewLeadershipFunc(s.ctx, f, store, s.ValidUntil, func() {
		store.gone.unregister(reg)
		store.mu.Lock()
		delete(store.leaders, f)
		store.mu.Unlock()
		release()
	})
	ll := &localLeader{end: end}
	store.mu.Lock()
	// A leadership that ended already (its session ended meanwhile) was
	// cleaned up before it could be listed; one that ends from now on
	// finds it listed.
	if l.Context().Err() == nil {
		store.leaders[f] = ll
	}
	store.mu.Unlock()
	if f.Election == election.JobManager {
		select {
		case store.jobManagerLed <- struct{}{}:
		default:
		}
	}
	store.gone.arm(reg, rev, func() {
		if l.Context().Err() != nil {
			return
		}
		cause := store.deletionCause(s.ctx, l, ll)
		if s.ended() {
			// The session ended meanwhile (a Close revokes the lease
			// first): that is what removed the key.
			cause = hastore.ErrSessionEnded
		}
		ll.end(cause)
	})
	return l
}

// errCandidacyVanished: a candidacy key that a campaign found in place was
// gone by its next step (its lease ended, or its session resigned).
var errCandidacyVanished = errors.New("hastore: candidacy key vanished while entering")

// enter creates the session's candidacy key in election, through the
// committer, and returns its create revision: the epoch it leads with;
// leads reports that no older key was left at that moment, so that the
// candidacy leads at once. A key left from an earlier candidacy of the
// session keeps its place and takes address.
func (s *etcdSession) enter(ctx context.Context, election, key, address string) (rev int64, leads bool, err error) {
	store := s.store
	pfx := store.electionPrefix(election) + "/"
	// The election's oldest key, read in the same transaction, after the
	// create: if it is the candidacy's own, no predecessor is left.
	oldest := clientv3.OpGet(pfx, clientv3.WithFirstCreate()...)
	create := clientv3.OpTxn(
		[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", 0)},
		[]clientv3.Op{clientv3.OpPut(key, address, clientv3.WithLease(s.lease)), oldest},
		[]clientv3.Op{clientv3.OpGet(key), oldest})
	// Keys created in one transaction share its revision: two candidacies
	// of one election must not share a batch, or they would share an
	// epoch. The election's prefix is a claim no key is written under.
	resp, hdr, err := store.commit.do(ctx, create, pfx)
	if err != nil {
		return 0, false, err
	}
	first := resp.GetResponses()[1].GetResponseRange().GetKvs()
	leads = len(first) > 0 && string(first[0].Key) == key
	if resp.GetSucceeded() {
		return hdr.GetRevision(), leads, nil
	}
	kvs := resp.GetResponses()[0].GetResponseRange().GetKvs()
	if len(kvs) == 0 {
		return 0, false, errCandidacyVanished
	}
	kv := kvs[0]
	if string(kv.Value) != address {
		proclaim := clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", kv.CreateRevision)},
			[]clientv3.Op{clientv3.OpPut(key, address, clientv3.WithLease(s.lease))}, nil)
		resp, _, err := store.commit.do(ctx, proclaim)
		if err != nil {
			return 0, false, err
		}
		if !resp.GetSucceeded() {
			return 0, false, errCandidacyVanished
		}
	}
	return kv.CreateRevision, leads, nil
}

// waitPredecessors blocks until no key under pfx has a create revision
// below rev, watching the youngest older key until it is deleted, and
// again.
func (s *Store) waitPredecessors(ctx context.Context, pfx string, rev int64) error {
	older := append(clientv3.WithLastCreate(), clientv3.WithMaxCreateRev(rev-1))
	for {
		resp, err := s.client.Get(ctx, pfx, older...)
		if err != nil {
			return err
		}
		if len(resp.Kvs) == 0 {
			return nil
		}
		key, at := string(resp.Kvs[0].Key), resp.Header.Revision
		for deleted := false; !deleted; {
			deleted, at = s.watchDelete(ctx, key, at)
			if err := ctx.Err(); err != nil {
				return err
			}
		}
	}
}

// deleteKey removes the session's candidacy key, within cleanupTimeout.
// It goes through the committer, so that it applies after a create of the
// key that is still in flight although its caller gave up.
func (s *etcdSession) deleteKey(key string) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if _, _, err := s.store.commit.do(ctx, clientv3.OpTxn(nil, []clientv3.Op{clientv3.OpDelete(key)}, nil)); err != nil {
		s.store.log.Warn("removing a failed candidacy", "key", key, "err", err)
	}
}

// watchDelete watches key from rev+1 until it is deleted (true) or the
// watch breaks, returning the revision to resume from after checking that
// the key still exists.
func (s *Store) watchDelete(ctx context.Context, key string, rev int64) (deleted bool, next int64) {
	for resp := range s.client.Watch(ctx, key, clientv3.WithRev(rev+1), clientv3.WithFilterPut()) {
		if err := resp.Err(); err != nil {
			break
		}
		for _, ev := range resp.Events {
			if ev.Type == clientv3.EventTypeDelete {
				return true, 0
			}
		}
		rev = resp.Header.Revision
	}
	if ctx.Err() != nil {
		return false, rev
	}
	// The watch broke (compaction, lost member): look at the key itself.
	for ctx.Err() == nil {
		gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		got, err := s.client.Get(gctx, key)
		cancel()
		if err == nil {
			return len(got.Kvs) == 0, got.Header.Revision
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	return false, rev
}

// deletionCause tells why a leader key disappeared.
func (s *Store) deletionCause(ctx context.Context, l *hastore.Leadership, ll *localLeader) error {
	if ll.resigning.Load() {
		return hastore.ErrResigned
	}
	var lease int64
	if _, err := fmt.Sscanf(l.Token().SessionID, "%x", &lease); err == nil {
		// The leadership is over either way; do not hold its end for long.
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		ttl, err := s.client.TimeToLive(ctx, clientv3.LeaseID(lease))
		if err == nil && ttl.TTL <= 0 {
			return hastore.ErrSessionEnded
		}
	}
	return hastore.ErrLeaderDeleted
}

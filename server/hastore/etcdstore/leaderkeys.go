package etcdstore

import (
	"context"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// leaderKeys tells the leaderships held through one store when their
// leader key is deleted: one etcd watch on the keys of every election, for
// all of them, rather than one watch (and its goroutines) per leadership.
// A process that leads 10,000 jobs holds 10,000 registrations in a map and
// one watch; the cost of a deletion is one map lookup.
//
// A registration is made before its candidacy key is created, so that no
// deletion can slip between the create and the watch. Its create revision
// is learnt later (arm); until then, deletions are remembered by revision.
// The key is gone for the registration once it was seen absent at a
// revision at or after its create revision: a deletion event's revision, or
// the revision of a read that did not find it. Events of an earlier
// incarnation of the same key are older than its create revision, and so
// are told apart.
type leaderKeys struct {
	s      *Store
	ctx    context.Context // ends with the store
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	regs    map[string]*keyReg
	running bool // the watch goroutine was started
}

// keyReg is one leadership's interest in its leader key.
type keyReg struct {
	key    string
	rev    int64  // create revision; 0 until armed
	goneAt int64  // a revision at which the key was seen absent; 0: never
	onGone func() // set by arm; called once the key is gone
	fired  bool
}

func newLeaderKeys(s *Store) *leaderKeys {
	ctx, cancel := context.WithCancel(context.Background())
	return &leaderKeys{s: s, ctx: ctx, cancel: cancel, regs: make(map[string]*keyReg)}
}

// register records interest in key, before its creation, and starts the
// store's watch if it is not running yet.
func (k *leaderKeys) register(key string) *keyReg {
	r := &keyReg{key: key}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.regs[key] = r
	if !k.running && k.ctx.Err() == nil {
		k.running = true
		k.wg.Add(1)
		go k.watch()
	}
	return r
}

// arm sets r's create revision and what to do once its key is gone, which
// is called at once (in a goroutine of its own, as always) if the key was
// already seen gone.
func (k *leaderKeys) arm(r *keyReg, rev int64, onGone func()) {
	k.mu.Lock()
	defer k.mu.Unlock()
	r.rev, r.onGone = rev, onGone
	k.checkLocked(r)
}

// unregister drops r.
func (k *leaderKeys) unregister(r *keyReg) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.regs[r.key] == r {
		delete(k.regs, r.key)
	}
}

// goneLocked records that key was absent at revision rev.
func (k *leaderKeys) goneLocked(key string, rev int64) {
	r := k.regs[key]
	if r == nil {
		return
	}
	r.goneAt = max(r.goneAt, rev)
	k.checkLocked(r)
}

// checkLocked fires r if it is armed and its key is gone.
func (k *leaderKeys) checkLocked(r *keyReg) {
	if r.fired || r.onGone == nil || r.goneAt == 0 || r.goneAt < r.rev {
		return
	}
	r.fired = true
	go r.onGone()
}

// watch follows deletions of leader keys until the store closes. A broken
// watch (a compaction, a member without a leader) is resumed after a read
// of every leader key, which finds the deletions the watch may have missed.
func (k *leaderKeys) watch() {
	defer k.wg.Done()
	pfx := k.s.prefix + "elections/"
	backoff := 50 * time.Millisecond
	for k.ctx.Err() == nil {
		rev, err := k.resync(pfx)
		if err != nil {
			k.s.log.Debug("reading leader keys failed; retrying", "err", err)
			select {
			case <-k.ctx.Done():
			case <-time.After(backoff):
				backoff = min(2*backoff, 2*time.Second)
			}
			continue
		}
		backoff = 50 * time.Millisecond
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(k.ctx))
		for resp := range k.s.client.Watch(wctx, pfx, clientv3.WithPrefix(), clientv3.WithRev(rev+1), clientv3.WithFilterPut()) {
			if resp.Err() != nil {
				break
			}
			k.mu.Lock()
			for _, ev := range resp.Events {
				if ev.Type == clientv3.EventTypeDelete {
					k.goneLocked(string(ev.Kv.Key), ev.Kv.ModRevision)
				}
			}
			k.mu.Unlock()
		}
		cancel()
	}
}

// resync reads which leader keys exist, marks the registrations whose key
// does not as gone at the read's revision, and returns that revision.
func (k *leaderKeys) resync(pfx string) (int64, error) {
	ctx, cancel := context.WithTimeout(k.ctx, 5*time.Second)
	defer cancel()
	resp, err := k.s.client.Get(ctx, pfx, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return 0, err
	}
	present := make(map[string]bool, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		present[string(kv.Key)] = true
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for key := range k.regs {
		if !present[key] {
			k.goneLocked(key, resp.Header.Revision)
		}
	}
	return resp.Header.Revision, nil
}

// close stops the watch and waits for it.
func (k *leaderKeys) close() {
	k.cancel()
	k.wg.Wait()
}

package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/internal/telemetry"
)

// Limits of one etcd request, as the committer assumes them.
const (
	// DefaultMaxTxnOps is etcd's default limit on the operations of one
	// transaction level (its max-txn-ops flag).
	DefaultMaxTxnOps = 128
	// DefaultMaxRequestBytes is etcd's default limit on one request (its
	// max-request-bytes flag): 1.5 MiB.
	DefaultMaxRequestBytes = 3 << 19
	// maxSendBytes is the etcd client's own limit on a message it sends.
	maxSendBytes = 2 << 20
	// requestMargin is left free in every batch for the request's framing
	// and the committer's estimate of it.
	requestMargin = 64 << 10
)

// errClosed fails writes made to, or still waiting in, a closed store.
var errClosed = fmt.Errorf("%w: store closed", hastore.ErrUnavailable)

// committer is the Store backend's group commit. Every fenced write reaches
// etcd through it, as one transaction op (clientv3.OpTxn) that carries the
// write's own comparisons: its fence, and its conditions nested below. A
// write that finds the committer idle goes out at once, alone, exactly as
// the transaction it is; writes that arrive while a transaction is in
// flight wait, and go out together as the next one: ONE etcd transaction
// whose Then holds each of them. etcd acknowledges about as many
// transactions a second whatever they carry, so under load the store's
// write rate grows with the batch instead of being divided by the writes
// each job makes. There is no timer: a batch is whatever queued while the
// previous one was in flight.
//
// A batch keeps every write's semantics. etcd evaluates all comparisons of
// a transaction, at every level, against the state before it, and then
// applies the chosen branches; so each write succeeds or fails on its own
// comparisons as if it had run alone, in some order among writes that were
// all pending at once. Such an order exists for the store's writes: plan
// puts (which read result keys), then result writes and confirmations
// (a result's clean mark or delete reads its plan key, and claims it, so
// that no write of that plan shares its batch; a FINISHED or FAILED
// result reads the job's cancel key, and claims it, so that no cancel
// request, which reads the result key, shares its batch), then resignations and candidacies (which change the leader keys that
// fences read). Two writes that put or delete the same key never
// share a batch (etcd refuses such a transaction, and their order
// matters): the later one waits for a later batch, and so does every
// later write to a key that a waiting write holds, so writes to a key
// apply in the order they were queued. Nor do two writes that create
// candidacies in the same election, which would get one create revision
// and so one epoch. A write that deletes a key prefix (a job's
// checkpoints, with its plan) claims the prefix as a key, and every write
// to a key under it claims the prefix too, so the same holds for them; a
// write that deletes any other range goes alone.
//
// A batch respects etcd's limits: at most maxOps operations on any level
// (the batch's writes, plus the deepest write's own levels below), and at
// most maxBytes in all. A write too large to share goes alone. If etcd
// still refuses a batch as a whole for something in it (too many ops, too
// large, a lease gone, a duplicate key), nothing of it was applied, and the
// committer sends it again in halves until each write has the answer it
// would have had alone.
//
// A caller that gives up (its context ends) before its write is sent takes
// it out of the queue; after that, the outcome is unknown to it and it gets
// its context's error. A batch's transaction ends early only when every
// caller in it has given up, or the store closes. Any other error of the
// transaction is every write's of the batch (the store wraps it in
// hastore.ErrUnavailable).
//
// The committer runs a goroutine only while writes are queued or in
// flight; close waits for it.
type committer struct {
	client   *clientv3.Client
	maxOps   int // etcd's max-txn-ops
	maxBytes int // what the writes of one batch may take

	ctx    context.Context // ends with close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu    sync.Mutex
	queue []*write // waiting, in arrival order
	// deferred are the waiting deferrable writes (hastore.Deferrable),
	// in arrival order: a batch takes them only once it looked at every
	// write of queue. deferredKeys counts their keys, so that a write
	// that shares one waits among them, behind it.
	deferred     []*write
	deferredKeys map[string]int
	running      bool // a goroutine is sending batches, one at a time
	closed       bool
}

// write is one store write waiting in, or sent by, the committer.
type write struct {
	// ctx is the caller's: a queued write whose caller gave up is not sent,
	// and a batch stops waiting for etcd once all its callers gave up.
	ctx   context.Context
	op    clientv3.Op // a Txn op: the write and its comparisons
	keys  []string    // keys it puts or deletes, prefixes it deletes, and exclusive claims
	alone bool        // it deletes a range other than a prefix: never batched
	size  int         // estimated encoded size
	depth int         // ops etcd counts for it below the batch's level

	sent bool          // taken into a batch; under committer.mu
	done chan struct{} // closed once resp or err is set
	resp *pb.TxnResponse
	hdr  *pb.ResponseHeader
	err  error
}

func newCommitter(client *clientv3.Client, maxOps, maxRequestBytes int) *committer {
	ctx, cancel := context.WithCancel(context.Background())
	return &committer{
		client:   client,
		maxOps:   maxOps,
		maxBytes: min(maxRequestBytes, maxSendBytes) - requestMargin,
		ctx:      ctx,
		cancel:   cancel,
	}
}

// do commits op, a transaction op (clientv3.OpTxn) holding one write with
// all its comparisons, and returns that transaction's response and the
// header of the etcd transaction that carried it. claims are further
// exclusive keys: no two writes with a claim in common share a batch. The
// error is ctx's if ctx ended first, errClosed once the store closed, and
// otherwise etcd's, as the transaction returned it.
func (c *committer) do(ctx context.Context, op clientv3.Op, claims ...string) (*pb.TxnResponse, *pb.ResponseHeader, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	w := &write{ctx: ctx, op: op, done: make(chan struct{})}
	w.keys = append(writtenKeys(op, &w.alone, nil), claims...)
	w.size = opSize(op)
	w.depth = opDepth(op)
	start := time.Now()

	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, nil, errClosed
	}
	c.enqueueLocked(w, hastore.IsDeferrable(ctx))
	if !c.running {
		c.running = true
		c.wg.Add(1)
		go c.run()
	}
	c.mu.Unlock()

	select {
	case <-w.done:
	case <-ctx.Done():
		// A write not sent yet stays in the queue until a batch's scan
		// reaches it and drops it (next): taking it out here would cost a
		// search of the queue, which holds every recovered job's campaign
		// after a takeover.
		// An answer that came with the cancellation still counts.
		select {
		case <-w.done:
		default:
			return nil, nil, ctx.Err()
		}
	}
	telemetry.StoreWrite(ctx, time.Since(start))
	switch {
	case w.err == nil:
		return w.resp, w.hdr, nil
	case ctx.Err() != nil:
		return nil, nil, ctx.Err()
	}
	return nil, nil, w.err
}

// close fails the writes still queued, ends the transaction in flight (its
// writes fail with hastore.ErrUnavailable) and waits for the committer's
// goroutine.
func (c *committer) close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.cancel()
	c.wg.Wait()
}

// run sends batches until the queue is empty.
func (c *committer) run() {
	defer c.wg.Done()
	for {
		c.mu.Lock()
		batch := c.next()
		if len(batch) == 0 {
			c.running = false
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		c.send(batch)
	}
}

// next takes the next batch out of the queues: in arrival order, every
// write that fits the limits, and claims no key that an earlier write of
// the batch, or an earlier write left waiting, claims; the deferred writes
// only after every other waiting write was looked at. c.mu is held.
//
// Its cost is the batch's, not the queue's: the scan stops once no write
// can fit any more, or after scanLimit writes of a queue were looked at,
// and the writes it passed over stay at the head of their queue, in
// order. A queue can hold every recovered job's campaign at once (110,000
// after a takeover at scale), and a scan of all of them per batch made
// the committer's goroutine the store's bottleneck (issue 33).
func (c *committer) next() []*write {
	if c.closed {
		for _, w := range append(c.queue, c.deferred...) {
			w.err = errClosed
			close(w.done)
		}
		c.queue, c.deferred, c.deferredKeys = nil, nil, nil
		return nil
	}
	b := &batchScan{claimed: make(map[string]bool), maxOps: c.maxOps, maxBytes: c.maxBytes, limit: c.scanLimit()}
	var whole bool
	c.queue, whole = b.scan(c.queue, nil)
	if whole {
		// Every other write was looked at: no deferred write can overtake
		// one that shares its keys.
		c.deferred, _ = b.scan(c.deferred, func(w *write) {
			for _, k := range w.keys {
				if c.deferredKeys[k]--; c.deferredKeys[k] <= 0 {
					delete(c.deferredKeys, k)
				}
			}
		})
	}
	return b.batch
}

// enqueueLocked queues w, with the deferred writes if deferred or if it
// shares a key with one of them; c.mu is held.
func (c *committer) enqueueLocked(w *write, deferred bool) {
	for _, k := range w.keys {
		deferred = deferred || c.deferredKeys[k] > 0
	}
	if !deferred {
		c.queue = append(c.queue, w)
		return
	}
	if c.deferredKeys == nil {
		c.deferredKeys = make(map[string]int)
	}
	for _, k := range w.keys {
		c.deferredKeys[k]++
	}
	c.deferred = append(c.deferred, w)
}

// batchScan builds one batch from the heads of the committer's queues.
type batchScan struct {
	batch            []*write
	claimed          map[string]bool // keys of the writes looked at
	size, depth      int
	maxOps, maxBytes int
	limit            int // waiting writes looked at per queue, at most
}

// scan adds to the batch what fits of q's head, and returns q without
// the writes taken or given up (left is called with each), and whether
// the scan looked at all of q.
func (b *batchScan) scan(q []*write, left func(*write)) (rest []*write, whole bool) {
	var (
		kept    int // writes passed over, moved to q[:kept]
		scanned int // writes of q looked at
		looked  int // of those, writes whose caller still waits
	)
	for _, w := range q {
		if n := len(b.batch); n > 0 && (b.batch[0].alone || looked >= b.limit || n+1+b.depth > b.maxOps) {
			break // nothing more fits, or the scan has gone far enough
		}
		scanned++
		if w.ctx.Err() != nil {
			// Its caller gave up and returns on its own: dropped.
			if left != nil {
				left(w)
			}
			continue
		}
		looked++
		fits := len(b.batch) == 0 ||
			!w.alone && !b.batch[0].alone &&
				b.size+w.size <= b.maxBytes &&
				len(b.batch)+1+max(b.depth, w.depth) <= b.maxOps
		for _, k := range w.keys {
			fits = fits && !b.claimed[k]
		}
		// A waiting write's keys stay claimed, so that no later write to
		// them overtakes it.
		for _, k := range w.keys {
			b.claimed[k] = true
		}
		if !fits {
			q[kept] = w
			kept++
			continue
		}
		w.sent = true
		if left != nil {
			left(w)
		}
		b.batch = append(b.batch, w)
		b.size += w.size
		b.depth = max(b.depth, w.depth)
	}
	// The writes passed over go back just before the part not scanned.
	whole = scanned == len(q)
	head := scanned - kept
	copy(q[head:scanned], q[:kept])
	clear(q[:head])
	if q = q[head:]; len(q) == 0 {
		q = nil
	}
	return q, whole
}

// scanLimit is how many waiting writes one batch's scan looks at, at
// most: twice what a batch can hold, which leaves room for writes that
// must wait behind others to the same keys.
func (c *committer) scanLimit() int { return 2 * c.maxOps }

// send commits batch and hands each write its answer.
func (c *committer) send(batch []*write) {
	// The transaction is abandoned only once every caller in it gave up
	// (or the store closes): one caller's cancellation must not cancel
	// the others' writes.
	ctx, cancel := context.WithCancel(c.ctx)
	defer cancel()
	var waiting atomic.Int64
	waiting.Store(int64(len(batch)))
	for _, w := range batch {
		stop := context.AfterFunc(w.ctx, func() {
			if waiting.Add(-1) == 0 {
				cancel()
			}
		})
		defer stop()
	}
	c.commit(ctx, batch)
	for _, w := range batch {
		close(w.done)
	}
}

// commit sends batch as one etcd transaction (a lone write as itself) and
// sets each write's answer. A batch that etcd refuses as a whole for its
// content is sent again in halves.
func (c *committer) commit(ctx context.Context, batch []*write) {
	if len(batch) == 1 {
		w := batch[0]
		cmps, then, els := w.op.Txn()
		resp, err := retryDropped(ctx, func() (*clientv3.TxnResponse, error) {
			return c.client.Txn(ctx).If(cmps...).Then(then...).Else(els...).Commit()
		})
		if err = c.closedErr(err); err != nil {
			w.err = err
			return
		}
		w.resp, w.hdr = (*pb.TxnResponse)(resp), resp.Header
		return
	}
	ops := make([]clientv3.Op, len(batch))
	for i, w := range batch {
		ops[i] = w.op
	}
	resp, err := retryDropped(ctx, func() (*clientv3.TxnResponse, error) {
		return c.client.Txn(ctx).Then(ops...).Commit()
	})
	err = c.closedErr(err)
	if err != nil && refusedForContent(err) && ctx.Err() == nil {
		half := len(batch) / 2
		c.commit(ctx, batch[:half])
		c.commit(ctx, batch[half:])
		return
	}
	for i, w := range batch {
		if err != nil {
			w.err = err
			continue
		}
		w.resp, w.hdr = resp.Responses[i].GetResponseTxn(), resp.Header
	}
}

// closedErr is errClosed for a transaction that failed because the store
// closed, and err otherwise.
func (c *committer) closedErr(err error) error {
	if err != nil && c.ctx.Err() != nil {
		return errClosed
	}
	return err
}

// refusedForContent reports that etcd refused a transaction, applying
// nothing, for something one of its writes may cause on its own.
func refusedForContent(err error) bool {
	for _, e := range []error{rpctypes.ErrTooManyOps, rpctypes.ErrRequestTooLarge, rpctypes.ErrLeaseNotFound, rpctypes.ErrDuplicateKey, rpctypes.ErrKeyNotFound} {
		if errors.Is(err, e) {
			return true
		}
	}
	// The client's or the server's gRPC limit on a message.
	return status.Code(err) == codes.ResourceExhausted
}

// writtenKeys appends to keys the keys that op puts or deletes on any
// branch, and sets *ranged if it deletes a range.
func writtenKeys(op clientv3.Op, ranged *bool, keys []string) []string {
	switch {
	case op.IsTxn():
		_, then, els := op.Txn()
		for _, branch := range [][]clientv3.Op{then, els} {
			for _, o := range branch {
				keys = writtenKeys(o, ranged, keys)
			}
		}
	case op.IsPut():
		keys = append(keys, string(op.KeyBytes()))
	case op.IsDelete():
		keys = append(keys, string(op.KeyBytes()))
		// A delete of a whole prefix claims the prefix, like a key: every
		// write of the store to a key under such a prefix claims it too
		// (a checkpoint write claims its job's checkpoint prefix), so
		// they never share a batch. Any other range goes alone.
		isPrefix := string(op.RangeBytes()) == clientv3.GetPrefixRangeEnd(string(op.KeyBytes()))
		*ranged = *ranged || len(op.RangeBytes()) > 0 && !isPrefix
	}
	return keys
}

// opDepth is how many ops etcd counts for op at and below its level when
// it checks max-txn-ops: for a transaction, the most of its compares,
// Then and Else, plus the deepest of those ops.
func opDepth(op clientv3.Op) int {
	if !op.IsTxn() {
		return 0
	}
	cmps, then, els := op.Txn()
	deepest := 0
	for _, branch := range [][]clientv3.Op{then, els} {
		for _, o := range branch {
			deepest = max(deepest, opDepth(o))
		}
	}
	return max(len(cmps), len(then), len(els)) + deepest
}

// opSize estimates the encoded size of op, generously.
func opSize(op clientv3.Op) int {
	const overhead = 32 // tags, lengths, revisions and flags of one op
	if !op.IsTxn() {
		return overhead + len(op.KeyBytes()) + len(op.RangeBytes()) + len(op.ValueBytes())
	}
	cmps, then, els := op.Txn()
	n := overhead
	for i := range cmps {
		n += proto.Size(cmps[i].GetCompare()) + 8
	}
	for _, branch := range [][]clientv3.Op{then, els} {
		for _, o := range branch {
			n += opSize(o)
		}
	}
	return n
}

// retryDropped runs call until etcd does not drop it, while ctx lasts.
// etcd drops a proposal it cannot take into its log, such as one made
// while its leadership moves to another member (see leaderplace.go):
// nothing of it was applied, so sending it again is safe. Pauses grow
// from 10ms to 200ms.
func retryDropped[T any](ctx context.Context, call func() (T, error)) (T, error) {
	pause := 10 * time.Millisecond
	for {
		resp, err := call()
		if err == nil || !proposalDropped(err) {
			return resp, err
		}
		select {
		case <-ctx.Done():
			return resp, err
		case <-time.After(pause):
			pause = min(2*pause, 200*time.Millisecond)
		}
	}
}

// proposalDropped reports etcd's "raft proposal dropped", which reaches
// a client without a code of its own (codes.Unknown).
func proposalDropped(err error) bool {
	return strings.Contains(err.Error(), "raft proposal dropped")
}

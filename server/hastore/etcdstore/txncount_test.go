package etcdstore_test

import (
	"context"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// txnCounter is an etcd KV that records every transaction committed
// through it: how many ops its Then holds and whether etcd refused it.
// Transactions can be held (see hold), so that a test can make writes
// queue behind one in flight.
type txnCounter struct {
	clientv3.KV

	mu      sync.Mutex
	sizes   []int // len(Then) of each transaction sent
	refused int   // transactions that returned an error
	holds   []*txnHold
}

// txnHold holds one transaction until released.
type txnHold struct {
	waiting chan struct{} // closed once the transaction waits
	release chan struct{} // closed to let it go
}

// countTxns makes c's KV a txnCounter and returns it. Call it before c is
// used concurrently.
func countTxns(c *clientv3.Client) *txnCounter {
	tc := &txnCounter{KV: c.KV}
	c.KV = tc
	return tc
}

func (c *txnCounter) Txn(ctx context.Context) clientv3.Txn {
	return &countedTxn{Txn: c.KV.Txn(ctx), ctx: ctx, c: c}
}

// hold makes the next transaction not yet held wait until the hold's
// release is closed, or its context ends.
func (c *txnCounter) hold() *txnHold {
	c.mu.Lock()
	defer c.mu.Unlock()
	h := &txnHold{waiting: make(chan struct{}), release: make(chan struct{})}
	c.holds = append(c.holds, h)
	return h
}

// snapshot returns the Then sizes of the transactions sent so far and how
// many were refused.
func (c *txnCounter) snapshot() (sizes []int, refused int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]int(nil), c.sizes...), c.refused
}

type countedTxn struct {
	clientv3.Txn
	ctx  context.Context
	c    *txnCounter
	then int
}

func (t *countedTxn) If(cs ...clientv3.Cmp) clientv3.Txn { t.Txn = t.Txn.If(cs...); return t }
func (t *countedTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	t.Txn, t.then = t.Txn.Then(ops...), len(ops)
	return t
}
func (t *countedTxn) Else(ops ...clientv3.Op) clientv3.Txn { t.Txn = t.Txn.Else(ops...); return t }

func (t *countedTxn) Commit() (*clientv3.TxnResponse, error) {
	t.c.mu.Lock()
	t.c.sizes = append(t.c.sizes, t.then)
	var h *txnHold
	if len(t.c.holds) > 0 {
		h, t.c.holds = t.c.holds[0], t.c.holds[1:]
	}
	t.c.mu.Unlock()
	if h != nil {
		close(h.waiting)
		select {
		case <-h.release:
		case <-t.ctx.Done():
			return nil, t.ctx.Err()
		}
	}
	resp, err := t.Txn.Commit()
	if err != nil {
		t.c.mu.Lock()
		t.c.refused++
		t.c.mu.Unlock()
	}
	return resp, err
}

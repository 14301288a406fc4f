package hastore_test

import (
	"context"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// txnCounter is an etcd KV that records every transaction committed
// through it: how many ops its Then holds and whether etcd refused it.
// Armed with hold, the next transaction waits until release, so that a
// test can make writes queue behind one in flight.
type txnCounter struct {
	clientv3.KV

	mu      sync.Mutex
	sizes   []int // len(Then) of each transaction sent
	refused int   // transactions that returned an error
	gate    chan struct{}
	held    chan struct{} // closed once the held transaction is waiting
}

// countTxns makes c's KV a txnCounter and returns it. Call it before c is
// used concurrently.
func countTxns(c *clientv3.Client) *txnCounter {
	tc := &txnCounter{KV: c.KV}
	c.KV = tc
	return tc
}

func (c *txnCounter) Txn(ctx context.Context) clientv3.Txn {
	return &countedTxn{Txn: c.KV.Txn(ctx), c: c}
}

// hold makes the next transaction wait for release; the returned channel
// is closed once it waits.
func (c *txnCounter) hold() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gate, c.held = make(chan struct{}), make(chan struct{})
	return c.held
}

// release lets the held transaction go.
func (c *txnCounter) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gate != nil {
		close(c.gate)
		c.gate = nil
	}
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
	gate, held := t.c.gate, t.c.held
	if gate != nil && held != nil {
		t.c.held = nil // only the first transaction waits
		close(held)
	} else {
		gate = nil
	}
	t.c.sizes = append(t.c.sizes, t.then)
	t.c.mu.Unlock()
	if gate != nil {
		<-gate
	}
	resp, err := t.Txn.Commit()
	if err != nil {
		t.c.mu.Lock()
		t.c.refused++
		t.c.mu.Unlock()
	}
	return resp, err
}

package etcdstore

import (
	"context"
	"fmt"
	"slices"
	"testing"
)

// A batch's scan of the committer's queue is bounded by the batch, not by
// the queue: it looks at scanLimit waiting writes at most, drops the
// writes given up on its way, and leaves the writes it passed over at the
// head of the queue, in their order, ahead of the writes it did not reach.
func TestNextScansABoundedHeadOfTheQueue(t *testing.T) {
	c := &committer{maxOps: 4, maxBytes: 1 << 20}
	gone, giveUp := context.WithCancel(context.Background())
	giveUp()
	live := context.Background()
	name := make(map[*write]string)
	add := func(ctx context.Context, label, key string) {
		w := &write{ctx: ctx, keys: []string{key}, size: 1, done: make(chan struct{})}
		name[w] = label
		c.queue = append(c.queue, w)
	}
	// Ten writes to key a, which must go one batch each, a given-up write
	// among them, then one to key b that could share the first batch if
	// the scan reached it.
	for i := range 10 {
		add(live, fmt.Sprintf("a%d", i), "a")
		if i == 2 {
			add(gone, "given-up", "z")
		}
	}
	add(live, "b", "b")
	labels := func(ws []*write) []string {
		var out []string
		for _, w := range ws {
			out = append(out, name[w])
		}
		return out
	}

	batch := c.next()
	if got := labels(batch); !slices.Equal(got, []string{"a0"}) {
		t.Errorf("first batch = %v, want [a0]: the scan stops after %d waiting writes, before b", got, c.scanLimit())
	}
	want := []string{"a1", "a2", "a3", "a4", "a5", "a6", "a7", "a8", "a9", "b"}
	if got := labels(c.queue); !slices.Equal(got, want) {
		t.Errorf("queue after the first batch = %v, want %v (the given-up write dropped, the rest in order)", got, want)
	}
	// b comes within reach once a3 heads the queue, and shares its batch.
	var rest [][]string
	for len(c.queue) > 0 {
		rest = append(rest, labels(c.next()))
	}
	wantRest := [][]string{{"a1"}, {"a2"}, {"a3", "b"}, {"a4"}, {"a5"}, {"a6"}, {"a7"}, {"a8"}, {"a9"}}
	if !slices.EqualFunc(rest, wantRest, slices.Equal) {
		t.Errorf("later batches = %v, want %v", rest, wantRest)
	}
}

// A batch that is full ends the scan: the writes after it keep their
// places and go in the next batch.
func TestNextStopsAtAFullBatch(t *testing.T) {
	c := &committer{maxOps: 3, maxBytes: 1 << 20}
	for i := range 7 {
		c.queue = append(c.queue, &write{ctx: context.Background(), keys: []string{fmt.Sprint(i)}, size: 1, done: make(chan struct{})})
	}
	first := slices.Clone(c.queue)
	if got := c.next(); len(got) != 3 || got[0] != first[0] || got[2] != first[2] {
		t.Fatalf("first batch: %d writes, want the first 3", len(got))
	}
	if len(c.queue) != 4 || c.queue[0] != first[3] {
		t.Fatalf("queue after a full batch: %d writes, want the last 4 in order", len(c.queue))
	}
}

// Deferrable writes (hastore.Deferrable) go after the others queued, even
// those queued after them; a write that shares a key with a deferred one
// waits behind it, deferred too, and a deferred write given up is
// forgotten with its keys.
func TestDeferredWritesGoLast(t *testing.T) {
	c := &committer{maxOps: 3, maxBytes: 1 << 20}
	c.mu.Lock()
	defer c.mu.Unlock()
	gone, giveUp := context.WithCancel(context.Background())
	name := make(map[*write]string)
	add := func(ctx context.Context, label string, deferred bool, keys ...string) {
		w := &write{ctx: ctx, keys: keys, size: 1, done: make(chan struct{})}
		name[w] = label
		c.enqueueLocked(w, deferred)
	}
	live := context.Background()
	add(live, "campaign-1", true, "e1")
	add(gone, "campaign-2", true, "e2")
	add(live, "campaign-3", true, "e3")
	add(live, "submission", false, "p")
	add(live, "resign-1", false, "e1") // behind campaign-1, whose key it shares
	add(live, "checkpoint", false, "c")
	giveUp()
	var batches [][]string
	for len(c.queue)+len(c.deferred) > 0 {
		var got []string
		for _, w := range c.next() {
			got = append(got, name[w])
		}
		batches = append(batches, got)
	}
	want := [][]string{{"submission", "checkpoint", "campaign-1"}, {"campaign-3", "resign-1"}}
	if !slices.EqualFunc(batches, want, slices.Equal) {
		t.Errorf("batches = %v, want %v", batches, want)
	}
	if len(c.deferredKeys) != 0 {
		t.Errorf("deferred keys left = %v, want none", c.deferredKeys)
	}
}

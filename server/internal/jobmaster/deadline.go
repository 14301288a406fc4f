package jobmaster

import (
	"container/heap"
	"sync"
	"time"
)

// deadlines runs functions at their deadlines, for all the JobMasters of a
// process, on one timer set to the earliest: a job that waits (a region
// for its slots, say) holds no timer of its own, and nothing wakes before
// some deadline is actually due.
type deadlines struct {
	mu    sync.Mutex
	queue deadlineQueue
	timer *time.Timer
}

type deadline struct {
	at    time.Time
	f     func()
	index int // in the queue; -1 once due or stopped
}

// after runs f on its own goroutine once d has passed, unless stop is
// called first; stop reports whether it prevented f.
func (ds *deadlines) after(d time.Duration, f func()) (stop func() bool) {
	e := &deadline{at: time.Now().Add(d), f: f}
	ds.mu.Lock()
	heap.Push(&ds.queue, e)
	ds.armLocked()
	ds.mu.Unlock()
	return func() bool {
		ds.mu.Lock()
		defer ds.mu.Unlock()
		if e.index < 0 {
			return false
		}
		heap.Remove(&ds.queue, e.index)
		ds.armLocked()
		return true
	}
}

// armLocked sets the timer for the earliest deadline; ds.mu must be held.
func (ds *deadlines) armLocked() {
	if len(ds.queue) == 0 {
		if ds.timer != nil {
			ds.timer.Stop()
		}
		return
	}
	wait := time.Until(ds.queue[0].at)
	if ds.timer == nil {
		ds.timer = time.AfterFunc(wait, ds.fire)
		return
	}
	ds.timer.Reset(wait)
}

// fire runs every due function and re-arms the timer.
func (ds *deadlines) fire() {
	now := time.Now()
	var due []func()
	ds.mu.Lock()
	for len(ds.queue) > 0 && !ds.queue[0].at.After(now) {
		e := heap.Pop(&ds.queue).(*deadline)
		due = append(due, e.f)
	}
	ds.armLocked()
	ds.mu.Unlock()
	for _, f := range due {
		go f()
	}
}

// deadlineQueue is a min-heap of deadlines by time (container/heap).
type deadlineQueue []*deadline

func (q deadlineQueue) Len() int           { return len(q) }
func (q deadlineQueue) Less(i, j int) bool { return q[i].at.Before(q[j].at) }
func (q deadlineQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index, q[j].index = i, j
}

func (q *deadlineQueue) Push(x any) {
	e := x.(*deadline)
	e.index = len(*q)
	*q = append(*q, e)
}

func (q *deadlineQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	old[len(old)-1] = nil
	e.index = -1
	*q = old[:len(old)-1]
	return e
}

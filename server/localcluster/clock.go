package localcluster

import (
	"sync"
	"time"
)

// FakeClock is a Clock (Config.Clock) that a test drives: its time moves only
// when the test says, and each timer armed on it is handed to the test,
// which fires it.
type FakeClock struct {
	mu    sync.Mutex
	now   time.Time
	armed chan *FakeTimer
}

// FakeTimer is a timer armed on a FakeClock.
type FakeTimer struct {
	// Delay is the duration the timer was armed for.
	Delay time.Duration
	clock *FakeClock
	f     func()

	mu      sync.Mutex
	stopped bool
}

// NewFakeClock returns a clock at start.
func NewFakeClock(start time.Time) *FakeClock {
	return &FakeClock{now: start, armed: make(chan *FakeTimer, 1024)}
}

// Now implements Clock.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc implements Clock.
func (c *FakeClock) AfterFunc(d time.Duration, f func()) func() bool {
	t := &FakeTimer{Delay: d, clock: c, f: f}
	c.armed <- t
	return t.stop
}

// Advance moves the clock's time forward by d.
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Next waits (in real time, at most wait) for the next timer armed on the
// clock.
func (c *FakeClock) Next(t TB, wait time.Duration) *FakeTimer {
	t.Helper()
	select {
	case timer := <-c.armed:
		return timer
	case <-time.After(wait):
		t.Fatalf("no timer armed within %v", wait)
		return nil
	}
}

// Pending returns the number of armed timers not yet taken with Next.
func (c *FakeClock) Pending() int { return len(c.armed) }

// Fire advances the clock by the timer's delay and runs its function,
// unless the timer was stopped.
func (t *FakeTimer) Fire() {
	t.mu.Lock()
	stopped := t.stopped
	t.stopped = true
	t.mu.Unlock()
	if stopped {
		return
	}
	t.clock.Advance(t.Delay)
	t.f()
}

func (t *FakeTimer) stop() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	was := !t.stopped
	t.stopped = true
	return was
}

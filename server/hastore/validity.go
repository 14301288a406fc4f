package hastore

import (
	"sync"
	"time"
)

// Validity is how long a session certainly holds at the store, as its
// holder measures it on its own monotonic clock: the send time of its
// last acknowledged renewal plus the TTL, less a tenth of the TTL for
// clock drift. A renewal's acknowledgement proves the store renewed the
// session no earlier than the request left, so this never overstates.
// Once that instant passes without a newer renewal, Validity calls its
// lapse function (once) and the session must count as lost. Both backends'
// sessions use it for Session.ValidUntil.
type Validity struct {
	lapse func()

	mu      sync.Mutex
	until   time.Time
	timer   *time.Timer
	stopped bool
}

// NewValidity starts measuring a session whose first renewal (its
// opening) was sent at sent with the given TTL; lapse runs on its own
// goroutine once the session may have expired.
func NewValidity(sent time.Time, ttl time.Duration, lapse func()) *Validity {
	v := &Validity{lapse: lapse, until: validUntil(sent, ttl)}
	v.timer = time.AfterFunc(time.Until(v.until), v.expire)
	return v
}

// expire calls lapse unless a renewal came meanwhile or v was stopped.
func (v *Validity) expire() {
	v.mu.Lock()
	if v.stopped || time.Now().Before(v.until) {
		v.mu.Unlock()
		return
	}
	v.stopped = true
	v.mu.Unlock()
	v.lapse()
}

// validUntil is how long a session renewed by a request sent at sent
// certainly holds.
func validUntil(sent time.Time, ttl time.Duration) time.Time {
	return sent.Add(ttl - ttl/10)
}

// Renewed records a renewal sent at sent that the store acknowledged with
// the given TTL.
func (v *Validity) Renewed(sent time.Time, ttl time.Duration) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if until := validUntil(sent, ttl); until.After(v.until) && !v.stopped {
		v.until = until
		v.timer.Reset(time.Until(until))
	}
}

// Until returns the instant until which the session certainly holds; zero
// once stopped or lapsed.
func (v *Validity) Until() time.Time {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.stopped {
		return time.Time{}
	}
	return v.until
}

// Stop ends the measurement (the session ended) without calling lapse.
func (v *Validity) Stop() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.stopped = true
	v.timer.Stop()
}

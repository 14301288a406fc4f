// Package liveness judges whether peers are alive from when they were last
// heard, on the monotonic clock, without blaming a peer for the judge's
// own stalls.
//
// A judge that was itself stalled (paused by SIGSTOP or a frozen VM,
// starved of CPU, stuck in a long pause) could not hear its peers
// meanwhile: their messages waited in socket buffers, and the probes it
// should have sent were never sent. Silence during that time proves
// nothing about a peer. A Judge therefore watches its own pulse: its owner
// ticks it at a fixed period, and whatever time a tick comes late is
// counted as the judge's deafness and left out of every peer's silence.
//
// The package holds no goroutines or timers: the owner ticks and asks.
// A Judge is not safe for concurrent use; its owner serializes calls.
package liveness

import "time"

// Judge measures peers' silence, less the time the judge itself was
// stalled.
type Judge struct {
	period time.Duration
	last   time.Time     // the last tick
	deaf   time.Duration // all lateness of ticks so far
}

// New returns a Judge whose owner promises to tick it every period.
func New(period time.Duration) *Judge {
	return &Judge{period: period}
}

// Tick records a tick at now. The part of the time since the previous
// tick that exceeds the period is deafness: the judge was stalled or too
// busy to hear. Call Tick before judging silences at now.
func (j *Judge) Tick(now time.Time) {
	if !j.last.IsZero() {
		if late := now.Sub(j.last) - j.period; late > 0 {
			j.deaf += late
		}
	}
	j.last = now
}

// Mark is when a peer was last heard.
type Mark struct {
	// At is the instant the peer was heard, on the monotonic clock.
	At   time.Time
	deaf time.Duration
}

// Heard returns the mark of a peer heard at now.
func (j *Judge) Heard(now time.Time) Mark {
	return Mark{At: now, deaf: j.deaf}
}

// Silence returns how long a peer last heard at m has been silent at now,
// not counting the time the judge was deaf since then.
func (j *Judge) Silence(m Mark, now time.Time) time.Duration {
	return now.Sub(m.At) - (j.deaf - m.deaf)
}

package hastore

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestValidity runs in a synctest bubble: its clock moves only when every
// goroutine in it is blocked, so the lapse is observed at the exact
// instant it is due, and the absence of a lapse after Stop is checked at
// a fixed fake time, not after a real sleep.
func TestValidity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 200 * time.Millisecond
		var lapses atomic.Int32
		start := time.Now()
		v := NewValidity(start, ttl, func() { lapses.Add(1) })
		if got, want := v.Until(), start.Add(ttl-ttl/10); !got.Equal(want) {
			t.Fatalf("Until = %v after start, want %v", got.Sub(start), want.Sub(start))
		}
		// A renewal sent later moves it; one sent earlier (an old answer) does not.
		v.Renewed(start.Add(50*time.Millisecond), ttl)
		v.Renewed(start.Add(10*time.Millisecond), ttl)
		due := start.Add(50*time.Millisecond + ttl - ttl/10)
		if got := v.Until(); !got.Equal(due) {
			t.Errorf("Until after renewals = %v after start, want %v", got.Sub(start), due.Sub(start))
		}
		time.Sleep(due.Sub(start) - time.Nanosecond)
		synctest.Wait()
		if lapses.Load() != 0 {
			t.Fatalf("lapsed %v after start, before its validity ended", time.Since(start))
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if lapses.Load() != 1 {
			t.Fatalf("%d lapses at the end of its validity, want 1", lapses.Load())
		}
		if !v.Until().IsZero() {
			t.Error("Until after the lapse is not zero")
		}
		v.Renewed(time.Now(), ttl) // too late: nothing revives it
		if !v.Until().IsZero() || lapses.Load() != 1 {
			t.Errorf("after a late renewal: Until %v, %d lapses; want zero and 1", v.Until(), lapses.Load())
		}

		stopped := NewValidity(time.Now(), ttl, func() { t.Error("a stopped validity lapsed") })
		stopped.Stop()
		time.Sleep(2 * ttl) // fake time: past the lapse it would have had
		synctest.Wait()
		if !stopped.Until().IsZero() {
			t.Error("Until of a stopped validity is not zero")
		}
	})
}

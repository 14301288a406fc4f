package hastore

import (
	"sync/atomic"
	"testing"
	"time"
)

func TestValidity(t *testing.T) {
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
	if got, want := v.Until(), start.Add(50*time.Millisecond+ttl-ttl/10); !got.Equal(want) {
		t.Errorf("Until after renewals = %v after start, want %v", got.Sub(start), want.Sub(start))
	}
	deadline := time.Now().Add(10 * time.Second)
	for lapses.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("never lapsed")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if lapsed := time.Since(start); lapsed < 50*time.Millisecond+ttl-ttl/10 {
		t.Errorf("lapsed %v after start, before its validity ended", lapsed)
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
	time.Sleep(2 * ttl) // the lapse would have come by now
	if !stopped.Until().IsZero() {
		t.Error("Until of a stopped validity is not zero")
	}
}

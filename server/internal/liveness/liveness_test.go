package liveness

import (
	"testing"
	"time"
)

func TestSilenceLeavesOutTheJudgesStalls(t *testing.T) {
	t0 := time.Now()
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	const s = time.Second
	for _, tc := range []struct {
		name  string
		ticks []time.Duration // tick times after t0
		heard time.Duration
		now   time.Duration
		want  time.Duration
	}{
		{"punctual ticks: plain silence", []time.Duration{0, s, 2 * s, 3 * s}, 500 * time.Millisecond, 3 * s, 2500 * time.Millisecond},
		{"a 13s pause right after hearing does not count", []time.Duration{0, s, 14 * s}, s, 14 * s, s},
		{"a pause before hearing does not discount later silence", []time.Duration{0, 10 * s, 11 * s, 12 * s}, 10 * s, 12 * s, 2 * s},
		{"ticks late by 200ms count 200ms less per tick", []time.Duration{0, 1200 * time.Millisecond, 2400 * time.Millisecond}, 0, 2400 * time.Millisecond, 2 * s},
		{"no ticks yet", nil, 0, 5 * s, 5 * s},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := New(s)
			var m Mark
			heardSet := false
			for _, tick := range tc.ticks {
				if !heardSet && tick > tc.heard {
					m, heardSet = j.Heard(at(tc.heard)), true
				}
				j.Tick(at(tick))
			}
			if !heardSet {
				m = j.Heard(at(tc.heard))
			}
			if got := j.Silence(m, at(tc.now)); got != tc.want {
				t.Errorf("Silence = %v, want %v", got, tc.want)
			}
		})
	}
}

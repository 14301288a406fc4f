package jobmaster

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
)

func TestRestartPolicy(t *testing.T) {
	t.Parallel()
	fixed := &jobplanev1.RestartStrategy{Strategy: &jobplanev1.RestartStrategy_FixedDelay_{FixedDelay: &jobplanev1.RestartStrategy_FixedDelay{Attempts: 3, Delay: durationpb.New(50 * time.Millisecond)}}}
	none := &jobplanev1.RestartStrategy{Strategy: &jobplanev1.RestartStrategy_None{None: &jobplanev1.RestartStrategy_NoRestart{}}}
	for _, tc := range []struct {
		name  string
		s     *jobplanev1.RestartStrategy
		delay time.Duration
		times int
	}{
		{"unset", nil, 0, 0},
		{"none", none, 0, 0},
		{"fixed delay", fixed, 50 * time.Millisecond, 3},
	} {
		p := &restartPolicy{strategy: tc.s}
		for i := range tc.times {
			d, ok := p.next()
			if !ok || d != tc.delay {
				t.Errorf("%s: restart %d = %v, %v; want %v, true", tc.name, i, d, ok, tc.delay)
			}
		}
		if _, ok := p.next(); ok {
			t.Errorf("%s: restart %d allowed, want refused", tc.name, tc.times)
		}
	}
}

package jobmaster

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
)

func TestRestartPolicy(t *testing.T) {
	t.Parallel()
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	fixed := &jobplanev1.RestartStrategy{Strategy: &jobplanev1.RestartStrategy_FixedDelay_{FixedDelay: &jobplanev1.RestartStrategy_FixedDelay{
		Attempts: 3, Delay: durationpb.New(ms(50)),
	}}}
	expo := &jobplanev1.RestartStrategy{Strategy: &jobplanev1.RestartStrategy_ExponentialDelay_{ExponentialDelay: &jobplanev1.RestartStrategy_ExponentialDelay{
		InitialDelay: durationpb.New(ms(100)), MaxDelay: durationpb.New(ms(500)), Multiplier: 2,
		ResetAfter: durationpb.New(10 * time.Second), Attempts: 6,
	}}}
	rate := &jobplanev1.RestartStrategy{Strategy: &jobplanev1.RestartStrategy_FailureRate_{FailureRate: &jobplanev1.RestartStrategy_FailureRate{
		MaxFailures: 2, Interval: durationpb.New(time.Minute), Delay: durationpb.New(ms(10)),
	}}}
	unlimited := &jobplanev1.RestartStrategy{Strategy: &jobplanev1.RestartStrategy_FixedDelay_{FixedDelay: &jobplanev1.RestartStrategy_FixedDelay{
		Unlimited: true, Delay: durationpb.New(ms(50)),
	}}}
	// A plan stored under contract 1.1, when attempts 0 meant unlimited,
	// keeps that meaning when it is recovered (submission refuses it now).
	zero := &jobplanev1.RestartStrategy{Strategy: &jobplanev1.RestartStrategy_FixedDelay_{FixedDelay: &jobplanev1.RestartStrategy_FixedDelay{
		Delay: durationpb.New(ms(50)),
	}}}
	expoUnlimited := &jobplanev1.RestartStrategy{Strategy: &jobplanev1.RestartStrategy_ExponentialDelay_{ExponentialDelay: &jobplanev1.RestartStrategy_ExponentialDelay{
		InitialDelay: durationpb.New(ms(100)), MaxDelay: durationpb.New(ms(100)), Unlimited: true,
	}}}
	expoZero := &jobplanev1.RestartStrategy{Strategy: &jobplanev1.RestartStrategy_ExponentialDelay_{ExponentialDelay: &jobplanev1.RestartStrategy_ExponentialDelay{
		InitialDelay: durationpb.New(ms(100)), MaxDelay: durationpb.New(ms(100)),
	}}}
	none := &jobplanev1.RestartStrategy{Strategy: &jobplanev1.RestartStrategy_None{None: &jobplanev1.RestartStrategy_NoRestart{}}}
	t0 := time.Unix(1_000_000, 0)
	type step struct {
		at    time.Duration // failure time after t0
		delay time.Duration
		ok    bool
	}
	many := func(delay time.Duration) []step {
		var steps []step
		for i := range 20 {
			steps = append(steps, step{time.Duration(i) * time.Second, delay, true})
		}
		return steps
	}
	for _, tc := range []struct {
		name  string
		s     *jobplanev1.RestartStrategy
		steps []step
	}{
		{"unset", nil, []step{{0, 0, false}}},
		{"none", none, []step{{0, 0, false}}},
		{"fixed delay", fixed, []step{{0, ms(50), true}, {1, ms(50), true}, {2, ms(50), true}, {3, 0, false}}},
		{"fixed delay, unlimited", unlimited, many(ms(50))},
		{"fixed delay, attempts 0 of a 1.1 plan", zero, many(ms(50))},
		{"exponential, unlimited", expoUnlimited, many(ms(100))},
		{"exponential, attempts 0 of a 1.1 plan", expoZero, many(ms(100))},
		{"exponential grows to its max", expo, []step{
			{0, ms(100), true}, {time.Second, ms(200), true}, {2 * time.Second, ms(400), true}, {3 * time.Second, ms(500), true},
		}},
		{"exponential resets after a quiet run", expo, []step{
			{0, ms(100), true}, {time.Second, ms(200), true}, {20 * time.Second, ms(100), true}, {21 * time.Second, ms(200), true},
			{22 * time.Second, ms(400), true}, {23 * time.Second, ms(500), true}, {24 * time.Second, 0, false},
		}},
		{"failure rate", rate, []step{
			{0, ms(10), true}, {time.Second, ms(10), true}, {2 * time.Second, 0, false},
		}},
		{"failure rate forgets old failures", rate, []step{
			{0, ms(10), true}, {time.Second, ms(10), true}, {2 * time.Minute, ms(10), true}, {2*time.Minute + time.Second, ms(10), true},
		}},
	} {
		p := &restartPolicy{strategy: tc.s}
		for i, st := range tc.steps {
			d, ok := p.next(t0.Add(st.at))
			if ok != st.ok || d != st.delay {
				t.Errorf("%s: failure %d at +%v = %v, %v; want %v, %v", tc.name, i, st.at, d, ok, st.delay, st.ok)
			}
		}
	}
}

func TestExponentialJitter(t *testing.T) {
	t.Parallel()
	s := &jobplanev1.RestartStrategy{Strategy: &jobplanev1.RestartStrategy_ExponentialDelay_{ExponentialDelay: &jobplanev1.RestartStrategy_ExponentialDelay{
		InitialDelay: durationpb.New(time.Second), MaxDelay: durationpb.New(time.Minute), Jitter: 0.5,
	}}}
	for _, tc := range []struct {
		r    float64
		want time.Duration
	}{{0, 500 * time.Millisecond}, {0.5, time.Second}, {0.75, 1250 * time.Millisecond}} {
		p := &restartPolicy{strategy: s, jitter: func() float64 { return tc.r }}
		if d, ok := p.next(time.Unix(0, 0)); !ok || d != tc.want {
			t.Errorf("jitter draw %v: delay %v, %v; want %v", tc.r, d, ok, tc.want)
		}
	}
}

// A multiplier so large that the next delay would overflow a Duration
// gives the max delay, not a negative one.
func TestExponentialHugeMultiplier(t *testing.T) {
	t.Parallel()
	s := &jobplanev1.RestartStrategy{Strategy: &jobplanev1.RestartStrategy_ExponentialDelay_{ExponentialDelay: &jobplanev1.RestartStrategy_ExponentialDelay{
		InitialDelay: durationpb.New(time.Second), MaxDelay: durationpb.New(time.Hour), Multiplier: 1e300,
	}}}
	p := &restartPolicy{strategy: s}
	for i, want := range []time.Duration{time.Second, time.Hour, time.Hour} {
		if d, ok := p.next(time.Unix(int64(i), 0)); !ok || d != want {
			t.Errorf("restart %d: delay %v, %v; want %v", i, d, ok, want)
		}
	}
}

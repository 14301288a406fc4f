package jobmaster

import (
	"math/rand/v2"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
)

// restartPolicy decides whether a failed job restarts, and after how long,
// per the job's restart strategy. It reads no clock: each failure brings
// its time, so tests drive it with any times they like.
type restartPolicy struct {
	strategy *jobplanev1.RestartStrategy
	used     int // restarts so far
	// jitter returns a number in [0, 1); default: math/rand.
	jitter func() float64

	failures    []time.Time   // failure-rate: failures within the interval
	lastFailure time.Time     // exponential-delay: for reset_after
	delay       time.Duration // exponential-delay: the next delay
}

// next reports whether the job may restart after a failure at now, and
// the delay before it does. It counts the restart when it allows one.
func (p *restartPolicy) next(now time.Time) (time.Duration, bool) {
	switch s := p.strategy.GetStrategy().(type) {
	case *jobplanev1.RestartStrategy_FixedDelay_:
		if p.exhausted(s.FixedDelay.GetAttempts(), s.FixedDelay.GetUnlimited()) {
			return 0, false
		}
		p.used++
		return s.FixedDelay.GetDelay().AsDuration(), true

	case *jobplanev1.RestartStrategy_ExponentialDelay_:
		e := s.ExponentialDelay
		if p.exhausted(e.GetAttempts(), e.GetUnlimited()) {
			return 0, false
		}
		initial, maxDelay := e.GetInitialDelay().AsDuration(), e.GetMaxDelay().AsDuration()
		if reset := e.GetResetAfter().AsDuration(); reset > 0 && !p.lastFailure.IsZero() && now.Sub(p.lastFailure) >= reset {
			p.delay = 0 // a long quiet run: back to the initial delay
		}
		if p.delay == 0 {
			p.delay = initial
		}
		d := p.delay
		mult := e.GetMultiplier()
		if mult == 0 {
			mult = 2
		}
		// Compared as a float: a product past the largest Duration (a
		// large multiplier) would convert to a negative one.
		if next := float64(p.delay) * mult; next < float64(maxDelay) {
			p.delay = time.Duration(next)
		} else {
			p.delay = maxDelay
		}
		if j := e.GetJitter(); j > 0 {
			// Spread the delay uniformly over d ± j·d.
			d += time.Duration((2*p.rand() - 1) * j * float64(d))
		}
		p.lastFailure = now
		p.used++
		return max(d, 0), true

	case *jobplanev1.RestartStrategy_FailureRate_:
		f := s.FailureRate
		window := f.GetInterval().AsDuration()
		kept := p.failures[:0]
		for _, t := range p.failures {
			if now.Sub(t) < window {
				kept = append(kept, t)
			}
		}
		p.failures = append(kept, now)
		if len(p.failures) > int(f.GetMaxFailures()) {
			return 0, false
		}
		p.used++
		return f.GetDelay().AsDuration(), true
	}
	// None and unset: no restart.
	return 0, false
}

// exhausted reports whether a fixed or exponential delay bounded by
// attempts and unlimited allows no more restarts. Submission refuses
// attempts 0 without unlimited (contract 1.2), but a plan stored under
// 1.1, when 0 meant unlimited, keeps that meaning when it is recovered:
// so 0 is unlimited here, whatever unlimited says.
func (p *restartPolicy) exhausted(attempts int32, unlimited bool) bool {
	if unlimited || attempts <= 0 {
		return false
	}
	return p.used >= int(attempts)
}

func (p *restartPolicy) rand() float64 {
	if p.jitter != nil {
		return p.jitter()
	}
	return rand.Float64()
}

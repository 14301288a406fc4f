package jobmaster

import (
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
)

// restartPolicy decides whether a failed job restarts, and after how long.
type restartPolicy struct {
	strategy *jobplanev1.RestartStrategy
	used     int // restarts so far
}

// next reports whether the job may restart once more, and the delay
// before it does. It counts the restart when it allows one.
func (p *restartPolicy) next() (time.Duration, bool) {
	switch s := p.strategy.GetStrategy().(type) {
	case *jobplanev1.RestartStrategy_FixedDelay_:
		if p.used >= int(s.FixedDelay.GetAttempts()) {
			return 0, false
		}
		p.used++
		return s.FixedDelay.GetDelay().AsDuration(), true
	case *jobplanev1.RestartStrategy_ExponentialDelay_:
		e := s.ExponentialDelay
		if e.GetAttempts() > 0 && p.used >= int(e.GetAttempts()) {
			return 0, false
		}
		mult := e.GetMultiplier()
		if mult == 0 {
			mult = 2
		}
		d := e.GetInitialDelay().AsDuration()
		for range p.used {
			d = time.Duration(float64(d) * mult)
			if d >= e.GetMaxDelay().AsDuration() {
				d = e.GetMaxDelay().AsDuration()
				break
			}
		}
		p.used++
		return d, true
	}
	// None, failure-rate (the scheduler issue) and unset: no restart.
	return 0, false
}

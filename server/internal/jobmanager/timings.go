package jobmanager

import (
	"time"

	"github.com/jobplane/jobplane/server/internal/dispatcher"
	"github.com/jobplane/jobplane/server/internal/jobmaster"
	"github.com/jobplane/jobplane/server/internal/runner"
)

// Bounds the JobManager promises whatever its configuration, advertised
// by GetClusterOverview (jobplane.v1.ServerTimings). They are design
// bounds, well above what docs/operations.md measures ("Timings and
// failover": a standby runs a SIGKILLed leader's jobs about two seconds
// after the kill, its session's TTL included), so that a loaded machine
// keeps them.
const (
	// TakeoverBound: a standby leads `jobmanager` and serves within it
	// after the leader's session ended.
	TakeoverBound = 5 * time.Second
	// JobRegrantBound: the `jobmanager` leader's process holds a job's
	// leadership again within it after the job's leadership ended.
	JobRegrantBound = 5 * time.Second
	// TaskCancelBound: the attempts of a CANCELED job are stopped within
	// it.
	TaskCancelBound = 5 * time.Second
)

// timings are the timings of cfg (with its defaults) that the Dispatcher
// advertises.
func (c Config) timings() dispatcher.Timings {
	c = c.withDefaults()
	slotYield := c.SlotYield
	if slotYield == 0 {
		slotYield = jobmaster.DefaultSlotYield
	}
	return dispatcher.Timings{
		SessionTTL: c.SessionTTL, Takeover: TakeoverBound, JobRegrant: JobRegrantBound,
		RevocationNotice: runner.ResignWithin, TaskCancel: TaskCancelBound, SlotYield: slotYield,
		HeartbeatTimeout: c.HeartbeatTimeout, TaskLease: c.TaskLease,
	}
}

package dispatcher

import (
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
)

// DefaultStreamHeartbeat is the idle time after which WatchJob sends a
// heartbeat unless Handler.Heartbeat says otherwise.
const DefaultStreamHeartbeat = 10 * time.Second

// Timings are the timings of the process that the Dispatcher reports
// without keeping them itself, as GetClusterOverview advertises them
// (jobplane.v1.ServerTimings): the JobManager sets them from its own
// configuration. Each field is the one of ServerTimings of the same name.
type Timings struct {
	SessionTTL, Takeover, JobRegrant, RevocationNotice, TaskCancel time.Duration
	// SlotYield is the JobMasters' give-back of idle slots; zero or
	// negative when they never give them back.
	SlotYield time.Duration
	// HeartbeatTimeout is the cluster protocol's heartbeat timeout.
	HeartbeatTimeout time.Duration
	// TaskLease is zero when the server grants no task leases.
	TaskLease time.Duration
}

// timings are the timings GetClusterOverview advertises: the configured
// ones, WatchJob's heartbeat, the changes a job keeps for resuming, the
// result retention and the plan recheck.
func (d *Dispatcher) timings(heartbeat time.Duration) *jobplanev1.ServerTimings {
	t := d.cfg.Timings
	return &jobplanev1.ServerTimings{
		SessionTtl: durationpb.New(t.SessionTTL), Takeover: durationpb.New(t.Takeover), JobRegrant: durationpb.New(t.JobRegrant),
		RevocationNotice: durationpb.New(t.RevocationNotice), TaskCancel: durationpb.New(t.TaskCancel),
		SlotYield: durationpb.New(max(t.SlotYield, 0)), StreamHeartbeat: durationpb.New(heartbeat),
		WatchResumeWindow: maxHistory, ResultRetention: durationpb.New(max(d.cfg.ResultRetention, 0)),
		TaskExecutorHeartbeatTimeout: durationpb.New(t.HeartbeatTimeout), TaskLease: durationpb.New(max(t.TaskLease, 0)),
		PlanRecheck: durationpb.New(d.planRecheck()),
	}
}

package localcluster

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"connectrpc.com/connect"

	"github.com/jobplane/jobplane/sdk/taskexecutor"
	"github.com/jobplane/jobplane/sdk/worker"
	"github.com/jobplane/jobplane/server/hastore"
)

// Defaults of Config.
const (
	// DefaultTaskExecutors is the default of Config.TaskExecutors.
	DefaultTaskExecutors = 1
	// DefaultSlots is the default of Config.Slots.
	DefaultSlots = 4
	// DefaultStartTimeout is the default of Config.StartTimeout.
	DefaultStartTimeout = time.Minute
	// DefaultJobManagers is the default of Config.JobManagers.
	DefaultJobManagers = 1
)

// Config configures an in-process cluster. The zero value is a usable
// cluster of one JobManager and one TaskExecutor that runs the built-in
// invokables (noop, sleep, fail, count) only.
//
// The first fields are what a program or a test of task functions sets;
// those after JobManagers shape the cluster for tests of the server
// itself: its timings and limits, and the hooks through which a test
// records what the components do or breaks it.
type Config struct {
	// Functions are the task functions the TaskExecutors offer, by
	// invokable name (the JobVertex's invokable). A name given here
	// replaces a built-in. A function that panics fails its attempt with
	// the panic's value (its stack goes to the task's logger) instead of
	// crashing the process. A function's Task.Logger writes into the
	// attempt's output, which the cluster keeps for clients to read
	// (DispatcherService.GetTaskOutput, `jobplane logs`), and to Logger.
	Functions map[string]worker.Func
	// TaskExecutors is the number of TaskExecutors. A negative number
	// starts none: a JobManager alone, which TaskExecutors started
	// elsewhere join through the HA store it serves. Default:
	// DefaultTaskExecutors.
	TaskExecutors int
	// Slots is the number of slots per TaskExecutor. Default: DefaultSlots.
	Slots int
	// DataDir is the directory of the embedded HA store; it is kept on
	// Close, so a later cluster on it recovers its jobs and results.
	// Default: a new temporary directory, removed on Close.
	DataDir string
	// StartTimeout bounds Start, besides its context. Default:
	// DefaultStartTimeout.
	StartTimeout time.Duration
	// Logger receives the logs of every component, and what task
	// functions log (Task.Logger), with the attempt's job, vertex, subtask
	// and attempt as attributes. Default: logs are dropped (the
	// attempts' outputs are kept all the same).
	Logger *slog.Logger

	// JobManagers is the number of JobManagers, all on the one HA store;
	// the first leads once Start returned, the others stand by. Default:
	// DefaultJobManagers.
	JobManagers int
	// SessionTTL, HeartbeatInterval and HeartbeatTimeout are the
	// JobManagers' timings (see jobmanager.Config in the server): how long
	// a dead leader keeps its leadership, and how often TaskExecutors and
	// JobManagers hear from each other and how long their silence is
	// borne. Defaults: the JobManager's (2s, 200ms and 1.2s). The timeout
	// must be at least twice the interval and less than two thirds of
	// the TTL.
	SessionTTL, HeartbeatInterval, HeartbeatTimeout time.Duration
	// SlotTimeout bounds how long a job's region waits for slots before
	// its deployment fails, and after SlotYield a waiting job gives back
	// the idle slots it holds (negative: never). Defaults: 5m and 5s.
	SlotTimeout, SlotYield time.Duration
	// ResultRetention, when positive, deletes job results this long after
	// their job ended. Default: keep them.
	ResultRetention time.Duration
	// OutputRetention is how long the JobManagers keep in memory where an
	// ended job's attempts ran, with its graph, for GetTaskOutput; after
	// it, the placements kept with the job's result serve. Default: 10m.
	OutputRetention time.Duration
	// DetailsRetention and DetailsSubtasks bound the final details of
	// ended jobs the JobManagers keep for GetJob: how long, and how many
	// subtasks in all. Defaults: 10m and 1,000,000.
	DetailsRetention time.Duration
	DetailsSubtasks  int
	// MaxJobs and MaxClusterSubtasks bound the cluster's live jobs and
	// their subtasks in all; a new job over either is refused with
	// RESOURCE_EXHAUSTED. Zero: no limit (the default).
	MaxJobs, MaxClusterSubtasks int
	// AdmissionWindow bounds the jobs launched at once that wait for
	// their first slots; see dispatcher.Config. Zero: the default
	// (dispatcher.DefaultAdmissionWindow); negative: no window.
	AdmissionWindow int
	// DispatcherOptions are added to every JobManager's public API
	// handler (DispatcherService), in order: authentication and
	// authorization, then per-client limits. Default: none.
	DispatcherOptions []connect.HandlerOption
	// Invokables are offered by every TaskExecutor besides the built-ins
	// and Functions, as the TaskExecutor runtime takes them; a name in
	// both Invokables and Functions runs the function. Default: none.
	Invokables map[string]taskexecutor.Invokable
	// AllowExec makes every TaskExecutor offer the built-in exec, which
	// runs whatever command a job names. Default: false: exec is not
	// offered, and a job that needs it is refused at submission.
	AllowExec bool
	// CancelGrace is how long a canceled task gets to stop before it is
	// killed. Default: taskexecutor.DefaultCancelGrace.
	CancelGrace time.Duration
	// Clock, if set, drives the JobMasters' restart delays instead of the
	// real clock: a *FakeClock, say. Default: the real clock.
	Clock Clock

	// WrapStore, if set, wraps the HA store the first JobManager uses,
	// to record its calls or inject faults (a *Recorder, say); the other
	// JobManagers, the TaskExecutors and Cluster.Store use the store
	// itself. Default: none.
	WrapStore func(hastore.Store) hastore.Store
	// TaskExecutorInterceptors wrap every TaskExecutor's handler, inside
	// the recording of Cluster.Tasks: a call that is handled but whose
	// answer is lost, say. Default: none.
	TaskExecutorInterceptors []connect.Interceptor
	// TaskExecutorClientInterceptors wrap every TaskExecutor's calls to
	// the JobManagers, inside the recording of Cluster.Tasks: a
	// TaskExecutor cut off from them for a while, say. Default: none.
	TaskExecutorClientInterceptors []connect.Interceptor
}

// Clock is the time of the JobMasters' restart delays: Config.Clock.
// FakeClock implements it.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// AfterFunc calls f on its own goroutine after d; stop cancels it
	// and reports whether it did so before f was called.
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

// Validate reports whether the configuration can be used.
func (c Config) Validate() error {
	var errs []error
	if c.Slots < 0 {
		errs = append(errs, errors.New("localcluster: slots must not be negative"))
	}
	if c.JobManagers < 0 {
		errs = append(errs, errors.New("localcluster: the number of JobManagers must not be negative"))
	}
	if c.MaxJobs < 0 || c.MaxClusterSubtasks < 0 || c.DetailsSubtasks < 0 {
		errs = append(errs, errors.New("localcluster: the job and subtask limits must not be negative"))
	}
	for _, d := range []time.Duration{c.StartTimeout, c.SessionTTL, c.HeartbeatInterval, c.HeartbeatTimeout,
		c.SlotTimeout, c.ResultRetention, c.OutputRetention, c.DetailsRetention, c.CancelGrace} {
		if d < 0 {
			errs = append(errs, errors.New("localcluster: durations other than SlotYield must not be negative"))
			break
		}
	}
	for name, f := range c.Functions {
		if name == "" || f == nil {
			errs = append(errs, fmt.Errorf("localcluster: function %q: a function needs a name and a body", name))
		}
	}
	if err := c.jobManager(nil, nil).ValidateTimings(); err != nil {
		errs = append(errs, fmt.Errorf("localcluster: %w", err))
	}
	return errors.Join(errs...)
}

func (c Config) withDefaults() Config {
	switch {
	case c.TaskExecutors == 0:
		c.TaskExecutors = DefaultTaskExecutors
	case c.TaskExecutors < 0:
		c.TaskExecutors = 0
	}
	if c.Slots == 0 {
		c.Slots = DefaultSlots
	}
	if c.StartTimeout == 0 {
		c.StartTimeout = DefaultStartTimeout
	}
	if c.JobManagers == 0 {
		c.JobManagers = DefaultJobManagers
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Package jobmanager wires a JobManager process: the Dispatcher, the
// ResourceManager and the JobMasters of its jobs, under the process's
// leadership of the election "jobmanager". Several JobManager processes on
// one HA store are active–standby: only the leader's Dispatcher and
// ResourceManager serve.
package jobmanager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/trace"

	"github.com/jobplane/jobplane/gen/jobplane/cluster/v1/clusterv1connect"
	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/sdk/jobgraph"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/internal/dispatcher"
	"github.com/jobplane/jobplane/server/internal/endpoint"
	"github.com/jobplane/jobplane/server/internal/jobmaster"
	"github.com/jobplane/jobplane/server/internal/resourcemanager"
	"github.com/jobplane/jobplane/server/internal/runner"
	"github.com/jobplane/jobplane/server/internal/telemetry"
)

// Config configures a JobManager.
type Config struct {
	// Store is the HA store. Required.
	Store hastore.Store
	// Address is the base URL at which this process serves its services.
	// Required.
	Address string
	// ClusterAddress, when set, is the base URL at which this process
	// serves the cluster protocol (ResourceManager, JobMasters, HA store)
	// apart from its public API at Address: the leader record publishes
	// both (election.Leader.ClusterAddress), which TaskExecutors follow,
	// and the JobMasters publish it as theirs. Clients and NOT_LEADER
	// answers keep Address. Default: Address.
	ClusterAddress string
	// HTTPClient carries calls between components. Required.
	HTTPClient connect.HTTPClient
	// SessionTTL is the TTL of the process's HA-store session: how long a
	// dead leader keeps its leadership. Default: DefaultSessionTTL.
	SessionTTL time.Duration
	// HeartbeatInterval and HeartbeatTimeout govern TaskExecutor
	// heartbeats at the ResourceManager and the JobMasters' probes of
	// TaskExecutors; a TaskExecutor stops the tasks of a JobMaster it has
	// not heard from for HeartbeatTimeout. The timeout must exceed twice
	// the interval, and stay below two thirds of SessionTTL (see
	// Validate). Defaults: DefaultHeartbeatInterval and
	// DefaultHeartbeatTimeout.
	HeartbeatInterval, HeartbeatTimeout time.Duration
	// TaskLease, if set, makes a change of leader cost the running work
	// nothing: heartbeat answers grant TaskExecutors this task lease, a
	// JobMaster that loses its leadership leaves its running attempts, and
	// the next adopts them; a subtask no TaskExecutor holds is deployed
	// again only once the lease has passed since the new JobMaster began
	// (see jobmaster.Config.TaskLease). It must be at least the heartbeat
	// timeout, and the same on every JobManager of the cluster. Default 0:
	// none; attempts stop with their JobMaster's leadership.
	TaskLease time.Duration
	// Limits bound submitted JobGraphs.
	Limits jobgraph.Limits
	// MaxJobs and MaxClusterSubtasks bound the cluster's live jobs and
	// their subtasks in all; see dispatcher.Config. Zero: no limit (the
	// default).
	MaxJobs, MaxClusterSubtasks int
	// AdmissionWindow bounds the jobs launched at once that wait for
	// their first slots; see dispatcher.Config. Zero: the default
	// (dispatcher.DefaultAdmissionWindow); negative: no window.
	AdmissionWindow int
	// DispatcherOptions are added to the DispatcherService's handler (the
	// public API) after the endpoint's own: authentication, authorization
	// and per-client limits. Default: none.
	DispatcherOptions []connect.HandlerOption
	// MaxRequestBytes and MaxResponseBytes are the limits of the endpoint
	// that serves the JobManager, for GetClusterOverview to report.
	MaxRequestBytes, MaxResponseBytes int64
	// ParallelismOverrides are the cluster's parallelism overrides.
	ParallelismOverrides map[string]int32
	// ResultRetention, when positive, deletes clean job results older than
	// it. Default: keep them.
	ResultRetention time.Duration
	// OutputRetention is how long the Dispatcher keeps in memory where an
	// ended job's attempts ran, with its graph, for GetTaskOutput; after
	// it, the placements kept with the job's result serve. Default:
	// dispatcher.DefaultOutputRetention.
	OutputRetention time.Duration
	// DetailsRetention and DetailsSubtasks bound the final details of
	// ended jobs the Dispatcher keeps for GetJob: how long, and how many
	// subtasks in all. Defaults: dispatcher.DefaultDetailsRetention and
	// dispatcher.DefaultDetailsSubtasks.
	DetailsRetention time.Duration
	DetailsSubtasks  int
	// SlotTimeout bounds a region's wait for slots, and after SlotYield a
	// job gives back the idle slots it holds while it waits; see
	// jobmaster.Config.
	SlotTimeout, SlotYield time.Duration
	// Clock, if set, drives the JobMasters' restart delays (tests).
	Clock jobmaster.Clock
	// Logger receives the JobManager's logs. Default: slog.Default().
	Logger *slog.Logger
}

// JobManager is one JobManager process's components.
type JobManager struct {
	cfg        Config
	log        *slog.Logger
	rm         *resourcemanager.ResourceManager
	dispatcher *dispatcher.Dispatcher
	router     *jobmaster.Router
	rmClient   clusterv1connect.ResourceManagerServiceClient

	mu      sync.Mutex
	session hastore.Session     // the current session; set by Run
	leading *hastore.Leadership // the jobmanager leadership of the current term, or nil
	health  Endpoint            // where leader-only services' health goes; set by Mount
}

// Defaults of Config's timings, chosen from measurement
// (docs/operations.md, "Timings and failover"): a SIGKILLed leader's jobs run again on a standby about
// two seconds later (the lease expires between five sixths of the TTL and
// the TTL after the kill, and etcd looks for expired leases every half
// second). The heartbeat timeout stays below two thirds of the TTL, as
// Validate requires, and holds six intervals, so a TaskExecutor stops a
// silent JobMaster's tasks only after four heartbeats in a row went
// unanswered (it starts canceling a third of the timeout early).
const (
	DefaultSessionTTL        = 2 * time.Second
	DefaultHeartbeatInterval = 200 * time.Millisecond
	DefaultHeartbeatTimeout  = 1200 * time.Millisecond
	// DefaultTaskLease is the commands' task lease unless set
	// (AutoTaskLease): long enough that a busy machine's stalls (about a
	// second at worst in our soaks) and a change of leader (about four
	// seconds after a SIGKILL) cost the running work nothing, short
	// enough that a TaskExecutor killed outright has its subtasks
	// deployed elsewhere ten seconds later (Flink waits 50 s).
	DefaultTaskLease = 10 * time.Second
)

// AutoTaskLease is the task lease the commands take unless one is set:
// DefaultTaskLease, or longer with longer timings, so that a leader
// paused for less than twice its session's TTL, or a TaskExecutor cut off
// for as long, stops nothing: at least twice the TTL and the heartbeat
// timeout.
func AutoTaskLease(sessionTTL, heartbeatTimeout time.Duration) time.Duration {
	return max(DefaultTaskLease, 2*sessionTTL, heartbeatTimeout)
}

func (c Config) withDefaults() Config {
	if c.SessionTTL == 0 {
		c.SessionTTL = DefaultSessionTTL
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if c.HeartbeatTimeout == 0 {
		c.HeartbeatTimeout = DefaultHeartbeatTimeout
	}
	return c
}

// Validate reports whether the configuration can be used. The timings
// must fit together: a TaskExecutor stops the tasks of a JobMaster it no
// longer hears from only after the heartbeat timeout, while a standby may
// take over the jobs as soon as two thirds of the session TTL after the
// leader's last lease renewal (renewals come every third of the TTL). A
// heartbeat timeout of two thirds of the TTL or more would let a
// recovered job run beside its stalled predecessor's tasks.
func (c Config) Validate() error {
	if c.Store == nil || c.Address == "" || c.HTTPClient == nil {
		return errors.New("jobmanager: store, address and HTTP client are required")
	}
	return c.ValidateTimings()
}

// ValidateTimings checks the session TTL and heartbeat settings alone, as
// Validate does; a command line checks them before opening anything.
func (c Config) ValidateTimings() error {
	if c.SessionTTL < 0 || c.HeartbeatInterval < 0 || c.HeartbeatTimeout < 0 || c.TaskLease < 0 {
		return errors.New("jobmanager: durations must not be negative")
	}
	c = c.withDefaults()
	if c.TaskLease > 0 && c.TaskLease < c.HeartbeatTimeout {
		return fmt.Errorf("jobmanager: the task lease (%v) must be at least the heartbeat timeout (%v)", c.TaskLease, c.HeartbeatTimeout)
	}
	if c.HeartbeatTimeout < 2*c.HeartbeatInterval {
		return fmt.Errorf("jobmanager: the heartbeat timeout (%v) must be at least twice the heartbeat interval (%v), or one late heartbeat loses a TaskExecutor",
			c.HeartbeatTimeout, c.HeartbeatInterval)
	}
	if 3*c.HeartbeatTimeout >= 2*c.SessionTTL {
		return fmt.Errorf("jobmanager: the heartbeat timeout (%v) must be less than two thirds of the session TTL (%v): "+
			"TaskExecutors stop a silent JobMaster's tasks only after the heartbeat timeout, and a standby may take over "+
			"two thirds of the TTL after the leader's last lease renewal; use a heartbeat timeout below %v or a session TTL above %v",
			c.HeartbeatTimeout, c.SessionTTL, (c.SessionTTL * 2 / 3).Round(time.Millisecond), (c.HeartbeatTimeout * 3 / 2).Round(time.Millisecond))
	}
	return nil
}

// New returns a JobManager for cfg.
func New(cfg Config) (*JobManager, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	jm := &JobManager{cfg: cfg, log: cfg.Logger}
	jm.router = jobmaster.NewRouter(jobmaster.RouterConfig{
		HeartbeatInterval: cfg.HeartbeatInterval, HeartbeatTimeout: cfg.HeartbeatTimeout, HTTPClient: cfg.HTTPClient, TaskLease: cfg.TaskLease,
		Members: func() (map[string]string, bool) { return jm.rm.Members() },
		LeaderAddress: func(ctx context.Context, jobID string) string {
			info, err := cfg.Store.Leader(ctx, election.Job(jobID))
			if err != nil {
				return ""
			}
			return info.Address
		},
		// The JobMasters lead on the process's session: their lease is
		// its validity.
		LeaseUntil: func() time.Time {
			sess := jm.currentSession()
			if sess == nil {
				return time.Time{}
			}
			return sess.ValidUntil()
		},
	})
	var err error
	// A store that keeps the TaskExecutor membership lets an adopting
	// JobMaster end its adoption once every member answered.
	members, _ := cfg.Store.(hastore.Members)
	jm.rm, err = resourcemanager.New(resourcemanager.Config{
		HTTPClient: cfg.HTTPClient, HeartbeatInterval: cfg.HeartbeatInterval, HeartbeatTimeout: cfg.HeartbeatTimeout, Logger: cfg.Logger,
		Members: members, TaskLease: cfg.TaskLease,
		// A JobMaster registers only under its job's current grant.
		Elections: cfg.Store,
		// Jobs holding slots on a TaskExecutor launch at once: tasks of
		// theirs may wait for their adoption (the Dispatcher is made
		// below, before any TaskExecutor can register).
		OnHeld: func(ids []string) { jm.dispatcher.Hurry(ids) },
	})
	if err != nil {
		return nil, err
	}
	// The JobMasters run beside the ResourceManager: they call it directly.
	jm.rmClient = jm.rm.Local()
	jm.dispatcher, err = dispatcher.New(dispatcher.Config{
		Store: cfg.Store, Jobs: jobs{jm}, Limits: cfg.Limits, ParallelismOverrides: cfg.ParallelismOverrides,
		MaxJobs: cfg.MaxJobs, MaxClusterSubtasks: cfg.MaxClusterSubtasks, AdmissionWindow: cfg.AdmissionWindow,
		MaxRequestBytes: cfg.MaxRequestBytes, MaxResponseBytes: cfg.MaxResponseBytes,
		ResultRetention: cfg.ResultRetention, Address: cfg.Address,
		// The ResourceManager's registry says which TaskExecutors there
		// are, and where (GetTaskOutput).
		TaskExecutors: taskExecutors{jm.rm}, HTTPClient: cfg.HTTPClient, ClientOptions: endpoint.ClientOptions(), OutputRetention: cfg.OutputRetention,
		DetailsRetention: cfg.DetailsRetention, DetailsSubtasks: cfg.DetailsSubtasks,
		Timings: cfg.timings(), Logger: cfg.Logger,
	})
	if err != nil {
		return nil, err
	}
	return jm, nil
}

// Services returns the services to mount: the Dispatcher, the
// ResourceManager and the JobMasters. All three are leader-only: a
// standby answers their calls NOT_LEADER (the JobMasters run where the
// Dispatcher leads). Mount mounts them with the health that says so.
func (jm *JobManager) Services() []Service {
	return []Service{
		{jobplanev1connect.DispatcherServiceName, func(opts ...connect.HandlerOption) (string, http.Handler) {
			return dispatcher.NewHandler(jm.dispatcher).Path(append(opts, jm.cfg.DispatcherOptions...)...)
		}, true},
		{clusterv1connect.ResourceManagerServiceName, jm.rm.Handler, true},
		{clusterv1connect.JobMasterServiceName, func(opts ...connect.HandlerOption) (string, http.Handler) {
			return clusterv1connect.NewJobMasterServiceHandler(jm.router, opts...)
		}, true},
	}
}

// Service is one RPC service to mount.
type Service struct {
	// Name is the service's fully qualified protobuf name.
	Name string
	// Handler builds the service's HTTP handler with the server's handler
	// options (such as read limits) and returns it with its URL path.
	Handler func(opts ...connect.HandlerOption) (string, http.Handler)
	// LeaderOnly says that only the leading process serves the service;
	// a standby answers NOT_LEADER.
	LeaderOnly bool
}

// Endpoint is where a JobManager's services are served: the server's
// endpoint.Endpoint.
type Endpoint interface {
	// Mount serves a service with the handler newHandler builds.
	Mount(service string, newHandler func(opts ...connect.HandlerOption) (string, http.Handler))
	// SetServing sets a mounted service's gRPC health status.
	SetServing(service string, serving bool)
}

// Mount mounts the JobManager's services on ep, before ep serves and
// before Run. The health of the leader-only services follows this
// process's leadership: NOT_SERVING until Run is granted the leadership,
// SERVING while it leads, NOT_SERVING again as soon as the leadership
// ends (lost, resigned, or Run stopping), so that a load balancer that
// checks them routes to the leader alone.
func (jm *JobManager) Mount(ep Endpoint) {
	for _, s := range jm.Services() {
		ep.Mount(s.Name, s.Handler)
		if s.LeaderOnly {
			ep.SetServing(s.Name, false)
		}
	}
	jm.mu.Lock()
	jm.health = ep
	jm.mu.Unlock()
}

// setServing sets the health of the leader-only services, if Mount gave
// an endpoint.
func (jm *JobManager) setServing(serving bool) {
	jm.mu.Lock()
	ep := jm.health
	jm.mu.Unlock()
	if ep == nil {
		return
	}
	for _, name := range leaderOnly {
		ep.SetServing(name, serving)
	}
}

// leaderOnly are the names of the services that Services marks
// LeaderOnly.
var leaderOnly = []string{
	jobplanev1connect.DispatcherServiceName,
	clusterv1connect.ResourceManagerServiceName,
	clusterv1connect.JobMasterServiceName,
}

// jobs are the JobManager's side of the Dispatcher's jobs: their plans
// persisted under the process's session, their runners under its
// JobMasters' router.
type jobs struct{ jm *JobManager }

var _ dispatcher.Jobs = jobs{}

// PersistPlan persists a submitted job's plan and, if lead is set and
// the session's store can, enters the job's election in the same write.
func (j jobs) PersistPlan(ctx context.Context, f hastore.Fence, plan *hastorev1.ExecutionPlan, lead bool) (*hastore.Leadership, error) {
	jm := j.jm
	if sess := jm.currentSession(); sess != nil && lead {
		return sess.PutExecutionPlanAndLead(ctx, f, plan, jm.clusterAddress())
	}
	return nil, jm.cfg.Store.PutExecutionPlan(ctx, f, plan)
}

// currentSession returns the process's HA-store session, or nil before
// the first.
func (jm *JobManager) currentSession() hastore.Session {
	jm.mu.Lock()
	defer jm.mu.Unlock()
	return jm.session
}

// NewRunner creates the runner of a job: it campaigns for the job on the
// process's session and runs the job's JobMaster while it leads.
func (j jobs) NewRunner(plan *hastorev1.ExecutionPlan, recovered bool, granted *hastore.Leadership, onStatus func(*jobplanev1.JobSummary)) (dispatcher.JobRunner, error) {
	jm := j.jm
	// Whether a JobMaster of the job adopts its predecessor's attempts
	// (with a task lease): every one does, but the first of a job
	// submitted in this term of the jobmanager leadership while that term
	// certainly holds. No other JobMaster of such a job can have run: its
	// plan was created in this term (a plan from before it would have
	// been recovered), and only a leader of jobmanager starts JobMasters.
	// Such a first JobMaster deploys at once rather than waiting out the
	// lease for attempts that cannot exist.
	jm.mu.Lock()
	term := jm.leading
	jm.mu.Unlock()
	var started atomic.Bool
	adopt := func() bool {
		first := !started.Swap(true)
		return recovered || !first || term == nil || !term.Valid()
	}
	return runner.New(runner.Config{
		JobID: plan.GetJobId(), Plan: plan, Session: jm.currentSession(), Store: jm.cfg.Store, Address: jm.clusterAddress(), Router: jm.router, Logger: jm.log,
		Recovered: recovered, Granted: granted,
		// The plan comes from the runner, which lets it go while the job
		// waits for a seat: this closure must not keep it.
		NewJobMaster: func(ctx context.Context, l *hastore.Leadership, plan *hastorev1.ExecutionPlan) (*jobmaster.JobMaster, error) {
			checkpoints, _ := jm.cfg.Store.(hastore.Checkpoints)
			return jobmaster.New(jobmaster.Config{
				JobID: plan.GetJobId(), Graph: plan.GetJobGraph(), Token: l.Token(), Valid: l.Valid, Leadership: l, Address: jm.clusterAddress(), Router: jm.router,
				ResourceManager: jm.rmClient, SubmitTime: plan.GetSubmitTime().AsTime(), RunID: plan.GetRunId(),
				HeartbeatInterval: jm.cfg.HeartbeatInterval, HeartbeatTimeout: jm.cfg.HeartbeatTimeout,
				TaskLease: jm.cfg.TaskLease, Adopt: adopt(),
				SlotTimeout: jm.cfg.SlotTimeout, SlotYield: jm.cfg.SlotYield, Clock: jm.cfg.Clock, OnStatus: onStatus, Logger: jm.log,
				Trace: trace.SpanContextFromContext(ctx), Checkpoints: checkpoints,
			})
		},
	})
}

// Run campaigns for the cluster's leadership and, while it holds it, runs
// the ResourceManager and the Dispatcher; it campaigns again when the
// leadership ends, until ctx ends.
func (jm *JobManager) Run(ctx context.Context) error {
	// The Router judges the TaskExecutors' heartbeats for every JobMaster
	// of the process, whatever the leadership.
	routed := make(chan error, 1)
	rctx, stopRouter := context.WithCancel(ctx)
	go func() { routed <- jm.router.Run(rctx) }()
	defer func() { stopRouter(); <-routed }()
	// The TaskExecutor and slot gauges read the ResourceManager's counters
	// when the metrics are collected.
	defer telemetry.ObserveCluster(func() telemetry.Cluster {
		o := jm.rm.Overview()
		per := make(map[string][2]int, len(o.Executors))
		for id, s := range o.Executors {
			per[id] = [2]int{s.Total, s.Total - s.Used}
		}
		return telemetry.Cluster{TaskExecutors: o.TaskExecutors, Slots: o.SlotsTotal, FreeSlots: o.SlotsAvailable,
			Jobs: jm.dispatcher.JobCounts(), JobsWaiting: o.JobsWaiting, JobsQueued: jm.dispatcher.Queued(), ExecutorSlots: per}
	})()
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		sess, err := jm.cfg.Store.OpenSession(ctx, hastore.SessionConfig{TTL: jm.cfg.SessionTTL})
		if err != nil {
			jm.log.Warn("opening an HA-store session failed; retrying", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
				backoff = min(2*backoff, 5*time.Second)
			}
			continue
		}
		backoff = 100 * time.Millisecond
		jm.mu.Lock()
		jm.session = sess
		jm.mu.Unlock()
		jm.lead(ctx, sess)
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_ = sess.Close(cctx)
		cancel()
	}
	return nil
}

// lead runs leadership terms on one session until it or ctx ends.
func (jm *JobManager) lead(ctx context.Context, sess hastore.Session) {
	for ctx.Err() == nil {
		l, err := sess.Campaign(ctx, election.JobManager, election.JoinAddresses(jm.cfg.Address, jm.cfg.ClusterAddress))
		if err != nil {
			if ctx.Err() == nil {
				jm.log.Warn("campaign for the jobmanager leadership failed", "err", err)
			}
			return
		}
		jm.log.Info("leadership granted", "token", l.Token(), "address", jm.cfg.Address)
		jm.mu.Lock()
		jm.leading = l
		jm.mu.Unlock()
		jm.setServing(true)
		telemetry.LeaderChanged(ctx, true)
		lctx := l.Context()
		done := make(chan struct{}, 2)
		go func() { _ = jm.rm.Lead(lctx, l); done <- struct{}{} }()
		go func() {
			if err := jm.dispatcher.Lead(lctx, l); err != nil {
				jm.log.Error("dispatcher stepped down", "err", err)
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				_ = l.Resign(rctx)
				cancel()
			}
			done <- struct{}{}
		}()
		select {
		case <-ctx.Done():
			jm.setServing(false)
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_ = l.Resign(rctx)
			cancel()
		case <-lctx.Done():
		}
		jm.setServing(false)
		<-done
		<-done
		jm.mu.Lock()
		jm.leading = nil
		jm.mu.Unlock()
		jm.log.Info("leadership ended", "token", l.Token(), "cause", context.Cause(lctx))
		telemetry.LeaderChanged(ctx, false)
		select {
		case <-sess.Done():
			return
		default:
		}
	}
}

// clusterAddress is where this process serves the cluster protocol:
// Config.ClusterAddress, or else Config.Address.
func (jm *JobManager) clusterAddress() string {
	if jm.cfg.ClusterAddress != "" {
		return jm.cfg.ClusterAddress
	}
	return jm.cfg.Address
}

// taskExecutors tells the Dispatcher of the TaskExecutors registered at
// the ResourceManager.
type taskExecutors struct {
	rm *resourcemanager.ResourceManager
}

var _ dispatcher.TaskExecutors = taskExecutors{}

// ListTaskExecutors lists the registered TaskExecutors, in id order.
func (t taskExecutors) ListTaskExecutors(after string, n int) ([]*jobplanev1.TaskExecutorInfo, bool) {
	return t.rm.TaskExecutors(after, n)
}

// TaskExecutorAddress returns a registered TaskExecutor's address.
func (t taskExecutors) TaskExecutorAddress(id string) (string, bool) {
	return t.rm.TaskExecutorAddress(id)
}

// SlotOverview counts the registered TaskExecutors and their slots.
func (t taskExecutors) SlotOverview() (taskExecutors, slotsTotal, slotsAvailable int) {
	o := t.rm.Overview()
	return o.TaskExecutors, o.SlotsTotal, o.SlotsAvailable
}

// JobsHoldingSlots lists the jobs holding slots on the registered
// TaskExecutors.
func (t taskExecutors) JobsHoldingSlots() []string { return t.rm.JobsHoldingSlots() }

// NotOffered checks a job's invokables against the registered
// TaskExecutors (see ResourceManager.NotOffered).
func (t taskExecutors) NotOffered(vertices []*jobplanev1.JobVertex) (missing []int, offered []string) {
	return t.rm.NotOffered(vertices)
}

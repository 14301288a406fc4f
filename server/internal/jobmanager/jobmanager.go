// Package jobmanager wires a JobManager process: the Dispatcher, the
// ResourceManager and the JobMasters of its jobs, under the process's
// leadership of the election "jobmanager". Several JobManager processes on
// one HA store are active–standby: only the leader's Dispatcher and
// ResourceManager serve.
package jobmanager

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/internal/dispatcher"
	"github.com/jobplane/jobplane/server/internal/jobgraph"
	"github.com/jobplane/jobplane/server/internal/jobmaster"
	"github.com/jobplane/jobplane/server/internal/resourcemanager"
	"github.com/jobplane/jobplane/server/internal/runner"
)

// Config configures a JobManager.
type Config struct {
	// Store is the HA store. Required.
	Store hastore.Store
	// Address is the base URL at which this process serves its services.
	// Required.
	Address string
	// HTTPClient carries calls between components. Required.
	HTTPClient connect.HTTPClient
	// SessionTTL is the TTL of the process's HA-store session: how long a
	// dead leader keeps its leadership. Default: 10s.
	SessionTTL time.Duration
	// HeartbeatInterval and HeartbeatTimeout govern TaskExecutor
	// heartbeats at the ResourceManager and the JobMasters' probes of
	// TaskExecutors. Defaults: 1s and 10s.
	HeartbeatInterval, HeartbeatTimeout time.Duration
	// Limits bound submitted JobGraphs.
	Limits jobgraph.Limits
	// ParallelismOverrides are the cluster's parallelism overrides.
	ParallelismOverrides map[string]int32
	// ResultRetention, when positive, deletes clean job results older than
	// it. Default: keep them.
	ResultRetention time.Duration
	// SlotTimeout bounds a region's wait for slots; see jobmaster.Config.
	SlotTimeout time.Duration
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
	rmClient   jobplanev1connect.ResourceManagerServiceClient

	mu      sync.Mutex
	session hastore.Session // the current session; set by Run
}

// New returns a JobManager for cfg.
func New(cfg Config) (*JobManager, error) {
	if cfg.Store == nil || cfg.Address == "" || cfg.HTTPClient == nil {
		return nil, errors.New("jobmanager: store, address and HTTP client are required")
	}
	if cfg.SessionTTL == 0 {
		cfg.SessionTTL = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	jm := &JobManager{cfg: cfg, log: cfg.Logger, router: jobmaster.NewRouter()}
	jm.router.LeaderAddress = func(ctx context.Context, jobID string) string {
		info, err := cfg.Store.Leader(ctx, hastore.JobElection(jobID))
		if err != nil {
			return ""
		}
		return info.Address
	}
	jm.rmClient = jobplanev1connect.NewResourceManagerServiceClient(cfg.HTTPClient, cfg.Address)
	var err error
	jm.rm, err = resourcemanager.New(resourcemanager.Config{
		HTTPClient: cfg.HTTPClient, HeartbeatInterval: cfg.HeartbeatInterval, HeartbeatTimeout: cfg.HeartbeatTimeout, Logger: cfg.Logger,
	})
	if err != nil {
		return nil, err
	}
	jm.dispatcher, err = dispatcher.New(dispatcher.Config{
		Store: cfg.Store, NewRunner: jm.newRunner, Limits: cfg.Limits, ParallelismOverrides: cfg.ParallelismOverrides,
		ResultRetention: cfg.ResultRetention,
		Overview: func() (int, int, int) {
			o := jm.rm.Overview()
			return o.TaskExecutors, o.SlotsTotal, o.SlotsAvailable
		},
		Logger: cfg.Logger,
	})
	if err != nil {
		return nil, err
	}
	return jm, nil
}

// Services returns the services to mount: the Dispatcher, the
// ResourceManager and the JobMasters.
func (jm *JobManager) Services() []Service {
	return []Service{
		{jobplanev1connect.DispatcherServiceName, dispatcher.NewHandler(jm.dispatcher).Path},
		{jobplanev1connect.ResourceManagerServiceName, jm.rm.Handler},
		{jobplanev1connect.JobMasterServiceName, func(opts ...connect.HandlerOption) (string, http.Handler) {
			return jobplanev1connect.NewJobMasterServiceHandler(jm.router, opts...)
		}},
	}
}

// Service is one RPC service to mount.
type Service struct {
	// Name is the service's fully qualified protobuf name.
	Name string
	// Handler builds the service's HTTP handler with the server's handler
	// options (such as read limits) and returns it with its URL path.
	Handler func(opts ...connect.HandlerOption) (string, http.Handler)
}

func (jm *JobManager) newRunner(plan *jobplanev1.ExecutionPlan, recovered bool, onStatus func(*jobplanev1.JobSummary)) (dispatcher.JobRunner, error) {
	jm.mu.Lock()
	sess := jm.session
	jm.mu.Unlock()
	return runner.New(runner.Config{
		JobID: plan.GetJobId(), Session: sess, Store: jm.cfg.Store, Address: jm.cfg.Address, Router: jm.router, Logger: jm.log,
		Recovered: recovered,
		NewJobMaster: func(token hastore.Token) (*jobmaster.JobMaster, error) {
			return jobmaster.New(jobmaster.Config{
				JobID: plan.GetJobId(), Graph: plan.GetJobGraph(), Token: token, Address: jm.cfg.Address,
				ResourceManager: jm.rmClient, HTTPClient: jm.cfg.HTTPClient, SubmitTime: plan.GetSubmitTime().AsTime(),
				HeartbeatInterval: jm.cfg.HeartbeatInterval, HeartbeatTimeout: jm.cfg.HeartbeatTimeout,
				SlotTimeout: jm.cfg.SlotTimeout, Clock: jm.cfg.Clock, OnStatus: onStatus, Logger: jm.log,
			})
		},
	})
}

// Run campaigns for the cluster's leadership and, while it holds it, runs
// the ResourceManager and the Dispatcher; it campaigns again when the
// leadership ends, until ctx ends.
func (jm *JobManager) Run(ctx context.Context) error {
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
		l, err := sess.Campaign(ctx, hastore.ElectionJobManager, jm.cfg.Address)
		if err != nil {
			if ctx.Err() == nil {
				jm.log.Warn("campaign for the jobmanager leadership failed", "err", err)
			}
			return
		}
		jm.log.Info("leadership granted", "token", l.Token(), "address", jm.cfg.Address)
		lctx := l.Context()
		done := make(chan struct{}, 2)
		go func() { _ = jm.rm.Lead(lctx, l.Token()); done <- struct{}{} }()
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
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_ = l.Resign(rctx)
			cancel()
		case <-lctx.Done():
		}
		<-done
		<-done
		jm.log.Info("leadership ended", "token", l.Token(), "cause", context.Cause(lctx))
		select {
		case <-sess.Done():
			return
		default:
		}
	}
}

package component

import (
	"context"
	"errors"
	"log/slog"
	"net/http"

	"connectrpc.com/connect"

	"github.com/jobplane/jobplane/gen/jobplane/cluster/v1/clusterv1connect"
	"github.com/jobplane/jobplane/sdk/taskexecutor"
	"github.com/jobplane/jobplane/server/internal/endpoint"
)

// TaskExecutorConfig configures a TaskExecutor component.
type TaskExecutorConfig struct {
	// Endpoint is where the TaskExecutor serves TaskExecutorService.
	// Default: a free loopback port ("127.0.0.1:0").
	Endpoint endpoint.Config
	// TaskExecutor configures the TaskExecutor itself; its Address is the
	// endpoint's URL, whatever it holds here. Its Store (the observer of
	// the ResourceManager's leader) and HTTPClient are required.
	TaskExecutor taskexecutor.Config
	// HandlerOptions are added to the TaskExecutorService handler after
	// the endpoint's own (interceptors that record or break calls, say).
	// Default: none.
	HandlerOptions []connect.HandlerOption
	// Metrics, if set, is served at GET /metrics on the endpoint.
	Metrics http.Handler
	// Logger receives the endpoint's logs. Default: the TaskExecutor's
	// logger, or slog.Default().
	Logger *slog.Logger
}

// TaskExecutor is a TaskExecutor serving on an endpoint of its own.
type TaskExecutor struct {
	*taskexecutor.TaskExecutor
	ep *endpoint.Endpoint
}

// NewTaskExecutor opens the TaskExecutor's endpoint, builds the
// TaskExecutor and mounts its service. Run it with Run, or release the
// listener with Close.
func NewTaskExecutor(cfg TaskExecutorConfig) (*TaskExecutor, error) {
	if cfg.Endpoint.Listen == "" {
		cfg.Endpoint.Listen = "127.0.0.1:0"
	}
	log := cfg.Logger
	if log == nil {
		log = cfg.TaskExecutor.Logger
	}
	if log == nil {
		log = slog.Default()
	}
	ep, err := endpoint.Listen(cfg.Endpoint, log)
	if err != nil {
		return nil, err
	}
	if cfg.Metrics != nil {
		ep.Handle("GET /metrics", cfg.Metrics)
	}
	cfg.TaskExecutor.Address = ep.URL()
	te, err := taskexecutor.New(cfg.TaskExecutor)
	if err != nil {
		ep.Close()
		return nil, err
	}
	ep.Mount(clusterv1connect.TaskExecutorServiceName, func(opts ...connect.HandlerOption) (string, http.Handler) {
		return te.Handler(append(opts, cfg.HandlerOptions...)...)
	})
	return &TaskExecutor{TaskExecutor: te, ep: ep}, nil
}

// URL returns the base URL at which the TaskExecutor serves.
func (t *TaskExecutor) URL() string { return t.ep.URL() }

// Run runs the TaskExecutor and serves its endpoint until ctx ends: the
// TaskExecutor stops its tasks, and then the endpoint drains its requests.
// It returns the first failure of either, or nil.
func (t *TaskExecutor) Run(ctx context.Context) error {
	serveCtx, stopServing := context.WithCancel(context.WithoutCancel(ctx))
	defer stopServing()
	served := make(chan error, 1)
	go func() { served <- t.ep.Run(serveCtx) }()
	teCtx, stopTE := context.WithCancel(ctx)
	defer stopTE()
	ran := make(chan error, 1)
	go func() { ran <- t.TaskExecutor.Run(teCtx) }()
	var err error
	select {
	case err = <-ran:
		stopServing()
		err = errors.Join(err, <-served)
	case err = <-served:
		stopTE()
		err = errors.Join(err, <-ran)
	}
	return err
}

// Close releases the endpoint's listener of a TaskExecutor that never
// ran.
func (t *TaskExecutor) Close() error { return t.ep.Close() }

package localcluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk"
	"github.com/jobplane/jobplane/sdk/taskexecutor"
	"github.com/jobplane/jobplane/sdk/worker"
	"github.com/jobplane/jobplane/server/hastore/etcdstore"
	"github.com/jobplane/jobplane/server/standalone"
)

// Defaults of Config.
const (
	// DefaultTaskExecutors is the default of Config.TaskExecutors.
	DefaultTaskExecutors = 1
	// DefaultSlots is the default of Config.Slots.
	DefaultSlots = 4
	// DefaultStartTimeout is the default of Config.StartTimeout.
	DefaultStartTimeout = time.Minute
)

// Config configures a local cluster. The zero value is a usable cluster
// that runs the built-in invokables (noop, sleep, fail) only.
type Config struct {
	// Functions are the task functions the TaskExecutors offer, by
	// invokable name (the JobVertex's invokable). A name given here
	// replaces a built-in. A function that panics fails its attempt with
	// the panic's value (its stack goes to the task's logger) instead of
	// crashing the process. A function's Task.Logger writes into the
	// attempt's output, which the cluster keeps for clients to read
	// (DispatcherService.GetTaskOutput, `jobplane logs`), and to Logger.
	Functions map[string]worker.Func
	// TaskExecutors is the number of TaskExecutors. Default:
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
}

// Validate reports whether the configuration can be used.
func (c Config) Validate() error {
	switch {
	case c.TaskExecutors < 0:
		return errors.New("localcluster: the number of TaskExecutors must not be negative")
	case c.Slots < 0:
		return errors.New("localcluster: slots must not be negative")
	case c.StartTimeout < 0:
		return errors.New("localcluster: the start timeout must not be negative")
	}
	for name, f := range c.Functions {
		if name == "" || f == nil {
			return fmt.Errorf("localcluster: function %q: a function needs a name and a body", name)
		}
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.TaskExecutors == 0 {
		c.TaskExecutors = DefaultTaskExecutors
	}
	if c.Slots == 0 {
		c.Slots = DefaultSlots
	}
	if c.StartTimeout == 0 {
		c.StartTimeout = DefaultStartTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Cluster is a running local cluster. Its methods are safe for concurrent
// use; Close stops it.
type Cluster struct {
	cluster *standalone.Cluster
	stop    context.CancelFunc
	done    chan struct{} // closed when the cluster's Run returned
	runErr  error         // Run's error, set before done closes
	tempDir string        // removed on Close; empty for Config.DataDir
	client  *sdk.Client

	closeOnce sync.Once
	closeErr  error
}

// Start starts a cluster and returns once its JobManager leads and all
// its TaskExecutors have registered, so a job submitted next finds its
// slots. It fails if the configuration is invalid, the data directory is
// in use by another cluster, or the cluster is not ready within
// Config.StartTimeout or before ctx ends; nothing is left running then.
func Start(ctx context.Context, cfg Config) (_ *Cluster, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithTimeout(ctx, cfg.StartTimeout)
	defer cancel()
	c := &Cluster{done: make(chan struct{})}
	dir := cfg.DataDir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "jobplane-localcluster-"); err != nil {
			return nil, fmt.Errorf("localcluster: %w", err)
		}
		c.tempDir = dir
	}
	invokables := make(map[string]taskexecutor.Invokable, len(cfg.Functions))
	for name, f := range cfg.Functions {
		invokables[name] = invokable(name, f, cfg.Logger)
	}
	c.cluster, err = standalone.New(ctx, standalone.Config{
		Store:         etcdstore.OpenConfig{DataDir: dir},
		TaskExecutors: cfg.TaskExecutors, Slots: cfg.Slots, Invokables: invokables,
		// The cluster's clients live in this process and are done by
		// Close: a short drain for stragglers keeps Close quick.
		ShutdownTimeout: time.Second,
		Logger:          cfg.Logger,
	})
	if err != nil {
		c.removeTemp()
		return nil, fmt.Errorf("localcluster: %w", err)
	}
	rctx, stop := context.WithCancel(context.Background())
	c.stop = stop
	go func() {
		c.runErr = c.cluster.Run(rctx)
		close(c.done)
	}()
	if c.client, err = sdk.New([]string{c.cluster.URL()}); err != nil {
		return nil, errors.Join(fmt.Errorf("localcluster: %w", err), c.Close())
	}
	if err := c.waitReady(ctx, cfg.TaskExecutors); err != nil {
		return nil, errors.Join(fmt.Errorf("localcluster: not ready: %w", err), c.Close())
	}
	return c, nil
}

// waitReady waits until the cluster's Dispatcher answers as the leader and
// counts n TaskExecutors. It asks again every few milliseconds: the
// contract has no watch of the cluster's membership, and this runs once,
// for the tens of milliseconds a start takes.
func (c *Cluster) waitReady(ctx context.Context, n int) error {
	// The generated client, not the SDK's, so that a JobManager not yet
	// leading is asked again at once rather than after a retry backoff.
	api := c.client.Dispatcher(c.cluster.URL())
	delay := time.Millisecond
	for {
		resp, err := api.GetClusterOverview(ctx, &jobplanev1.GetClusterOverviewRequest{})
		if err == nil && int(resp.GetTaskExecutorCount()) >= n {
			return nil
		}
		timer := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			timer.Stop()
			return errors.Join(ctx.Err(), err)
		case <-c.done:
			timer.Stop()
			return fmt.Errorf("cluster stopped: %w", c.runErr)
		case <-timer.C:
		}
		delay = min(2*delay, 20*time.Millisecond)
	}
}

// URL returns the base URL of the cluster's JobManager, such as
// "http://127.0.0.1:41235": any jobplane client (the SDK, a client
// generated from the contract, curl) reaches the DispatcherService there.
func (c *Cluster) URL() string { return c.cluster.URL() }

// Client returns the SDK client of the cluster, for everything beyond
// Execute: Submit, Watch, Cancel, List, and so on. It is the cluster's
// own: Close closes it.
func (c *Cluster) Client() *sdk.Client { return c.client }

// Execute submits g as a new job (with a new job id, from sdk.NewJobID),
// waits until it is globally terminal and returns its result: FINISHED,
// FAILED (with the failure) or CANCELED, none of them an error. If ctx
// ends first, Execute cancels the job, so that it does not outlive the
// call that started it, and returns ctx's error. An invalid graph fails
// with an *sdk.InvalidJobError before anything is sent.
func (c *Cluster) Execute(ctx context.Context, g *jobplanev1.JobGraph) (*jobplanev1.JobResult, error) {
	id := sdk.NewJobID()
	res, err := c.client.Execute(ctx, g, sdk.WithJobID(id))
	if err != nil && ctx.Err() != nil {
		// Ended before the job did: end the job too, briefly, whatever
		// ctx. A job never created is no error.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_, _ = c.client.Cancel(cctx, id)
		cancel()
		return nil, fmt.Errorf("localcluster: job %s: %w", id, ctx.Err())
	}
	if err != nil {
		return nil, fmt.Errorf("localcluster: job %s: %w", id, err)
	}
	return res, nil
}

// Close stops the cluster: running tasks are canceled, the JobManager
// resigns, every listener closes and the store stops; the temporary data
// directory, if the cluster made one, is removed. It returns once every
// goroutine the cluster started has ended, with the error that stopped the
// cluster, if any. Later calls return the same error and do nothing more.
func (c *Cluster) Close() error {
	c.closeOnce.Do(func() {
		// The client's idle connections first: the endpoint would wait for
		// them as it shuts down.
		if c.client != nil {
			c.client.Close()
		}
		c.stop()
		<-c.done
		c.closeErr = errors.Join(c.runErr, c.removeTemp())
	})
	return c.closeErr
}

func (c *Cluster) removeTemp() error {
	if c.tempDir == "" {
		return nil
	}
	dir := c.tempDir
	c.tempDir = ""
	return os.RemoveAll(dir)
}

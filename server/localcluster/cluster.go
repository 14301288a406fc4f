package localcluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
	"github.com/jobplane/jobplane/sdk"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/sdk/taskexecutor"
	"github.com/jobplane/jobplane/sdk/wire/transport"
	"github.com/jobplane/jobplane/server/component"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/internal/endpoint"
	"github.com/jobplane/jobplane/server/internal/jobmanager"
)

// shutdownTimeout is how long every endpoint of the cluster drains its
// requests on Close: the cluster's clients live in this process and are
// done by then, so a short drain for stragglers keeps Close quick.
const shutdownTimeout = time.Second

// Cluster is a running in-process cluster. Its methods are safe for
// concurrent use; Close stops it.
type Cluster struct {
	cfg        Config
	log        *slog.Logger
	store      hastore.Store
	closeStore func() error
	tempDir    string // removed on Close; empty for Config.DataDir

	jms   []*JobManager
	tes   []*TaskExecutor
	tasks *TaskLog
	fail  *failure

	http       *http.Client // the cluster's own, behind dispatcher
	dispatcher jobplanev1connect.DispatcherServiceClient
	client     *sdk.Client

	closeOnce sync.Once
	closeErr  error
}

// Start starts an in-process cluster and returns once its first
// JobManager leads and all its TaskExecutors have registered, so a job
// submitted next finds its slots. (Behind Config.DispatcherOptions that
// authenticate callers, the leader's Dispatcher may then still be
// recovering the jobs of Config.DataDir, and answer UNAVAILABLE for a
// moment.) It fails if the configuration is invalid, the data directory
// is in use by another cluster (ErrDataDirInUse), a component fails, or
// the cluster is not ready within Config.StartTimeout or before ctx ends;
// nothing is left running then.
func Start(ctx context.Context, cfg Config) (_ *Cluster, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithTimeout(ctx, cfg.StartTimeout)
	defer cancel()
	c := &Cluster{cfg: cfg, log: cfg.Logger, tasks: &TaskLog{}, fail: newFailure(), http: transport.NewClient(nil)}
	defer func() {
		if err != nil {
			err = errors.Join(fmt.Errorf("localcluster: %w", err), c.Close())
		}
	}()
	dir := cfg.DataDir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "jobplane-localcluster-"); err != nil {
			return nil, err
		}
		c.tempDir = dir
	}
	if c.store, c.closeStore, err = openStore(ctx, dir, c.log); err != nil {
		return nil, err
	}
	for i := range cfg.JobManagers {
		st := c.store
		if i == 0 && cfg.WrapStore != nil {
			st = cfg.WrapStore(st)
		}
		jm, err := c.startJobManager(i, st)
		if err != nil {
			return nil, err
		}
		if i == 0 {
			// The first one leads: it wins before the others campaign.
			if err := c.waitLeader(ctx, jm.url); err != nil {
				return nil, err
			}
		}
	}
	invokables := maps.Clone(cfg.Invokables)
	if invokables == nil {
		invokables = map[string]taskexecutor.Invokable{}
	}
	for name, f := range cfg.Functions {
		invokables[name] = invokable(name, f, c.log)
	}
	for i := range cfg.TaskExecutors {
		if err := c.startTaskExecutor(i, invokables); err != nil {
			return nil, err
		}
	}
	c.dispatcher = c.jms[0].dispatcher
	if c.client, err = sdk.New(c.urls()); err != nil {
		return nil, err
	}
	if err := c.waitReady(ctx, cfg.TaskExecutors); err != nil {
		return nil, fmt.Errorf("not ready: %w", err)
	}
	return c, nil
}

// New is Start for a test or benchmark: it fails t if the cluster does not
// start, and closes the cluster when t ends, failing t if Close fails.
func New(t TB, cfg Config) *Cluster {
	t.Helper()
	c, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("localcluster: Close: %v", err)
		}
	})
	return c
}

// jobManager is the configuration of the cluster's JobManagers.
func (c Config) jobManager(st hastore.Store, client *http.Client) jobmanager.Config {
	return jobmanager.Config{
		Store: st, HTTPClient: client,
		SessionTTL: c.SessionTTL, HeartbeatInterval: c.HeartbeatInterval, HeartbeatTimeout: c.HeartbeatTimeout,
		SlotTimeout: c.SlotTimeout, SlotYield: c.SlotYield, ResultRetention: c.ResultRetention,
		OutputRetention: c.OutputRetention, DetailsRetention: c.DetailsRetention, DetailsSubtasks: c.DetailsSubtasks,
		MaxJobs: c.MaxJobs, MaxClusterSubtasks: c.MaxClusterSubtasks, AdmissionWindow: c.AdmissionWindow, DispatcherOptions: c.DispatcherOptions,
		Clock: c.Clock, Logger: c.Logger,
	}
}

// startJobManager starts JobManager i on store st, on an endpoint of its
// own that also serves the cluster's store.
func (c *Cluster) startJobManager(i int, st hastore.Store) (*JobManager, error) {
	ep, err := endpoint.Listen(endpoint.Config{Listen: "127.0.0.1:0", ShutdownTimeout: shutdownTimeout}, c.log)
	if err != nil {
		return nil, err
	}
	component.ServeStore(ep, c.store, c.log)
	client := transport.NewClient(nil)
	jm, err := component.NewJobManager(ep, c.cfg.jobManager(st, client))
	if err != nil {
		ep.Close()
		return nil, err
	}
	name := fmt.Sprintf("jobmanager %d", i)
	h := &JobManager{url: ep.URL(), dispatcher: jobplanev1connect.NewDispatcherServiceClient(c.http, ep.URL()), client: client}
	// The endpoint serves before the JobManager runs, and until the
	// cluster stops (Close) or the JobManager did (Stop).
	h.serve = goRun(name+" endpoint", ep.Run, c.fail.set)
	h.run = goRun(name, jm.Run, c.fail.set)
	c.jms = append(c.jms, h)
	return h, nil
}

// startTaskExecutor starts TaskExecutor i, whose task calls go to the
// cluster's TaskLog.
func (c *Cluster) startTaskExecutor(i int, invokables map[string]taskexecutor.Invokable) error {
	id := new(string) // known once it is built, before any call
	record := connect.WithInterceptors(c.tasks.interceptor(id))
	cut := new(atomic.Bool)
	registered := make(chan struct{})
	client := transport.NewClient(nil)
	clientOptions := append(endpoint.ClientOptions(), record, connect.WithInterceptors(signalRegistered(registered)),
		connect.WithInterceptors(append(c.cfg.TaskExecutorClientInterceptors, cutOff(cut))...))
	te, err := component.NewTaskExecutor(component.TaskExecutorConfig{
		Endpoint: endpoint.Config{ShutdownTimeout: shutdownTimeout},
		TaskExecutor: taskexecutor.Config{
			Slots: c.cfg.Slots, Store: c.store, HTTPClient: client, ClientOptions: clientOptions,
			Invokables: invokables, AllowExec: c.cfg.AllowExec, CancelGrace: c.cfg.CancelGrace, Logger: c.log,
		},
		HandlerOptions: []connect.HandlerOption{record, connect.WithInterceptors(append(c.cfg.TaskExecutorInterceptors, silence(cut))...)},
	})
	if err != nil {
		return err
	}
	*id = te.ID()
	c.tes = append(c.tes, &TaskExecutor{id: te.ID(), url: te.URL(), cut: cut, client: client, registered: registered,
		run: goRun(fmt.Sprintf("taskexecutor %d", i), te.Run, c.fail.set)})
	return nil
}

// errLeads ends the observation of waitLeader.
var errLeads = errors.New("leads")

// waitLeader waits until the JobManager at url leads.
func (c *Cluster) waitLeader(ctx context.Context, url string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-c.fail.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	err := c.store.ObserveLeader(ctx, election.JobManager, func(l election.Leader) error {
		if l.Address == url {
			return errLeads
		}
		return nil
	})
	if errors.Is(err, errLeads) {
		return nil
	}
	select {
	case <-c.fail.done:
		return c.fail.err
	default:
	}
	return fmt.Errorf("%s not leading: %w", url, err)
}

// waitReady waits until every TaskExecutor has registered with the
// leader, and then until the first JobManager's Dispatcher answers as the
// leader and counts n TaskExecutors. It asks again every few
// milliseconds: the contract has no watch of the cluster's membership,
// and this runs once, for the tens of milliseconds a start takes. A
// refusal by the authentication of Config.DispatcherOptions counts as an
// answer: the cluster cannot prove who it is, and the leadership and the
// registrations were seen already.
func (c *Cluster) waitReady(ctx context.Context, n int) error {
	for _, te := range c.tes {
		select {
		case <-te.registered:
		case <-ctx.Done():
			return fmt.Errorf("%s not registered: %w", te.id, ctx.Err())
		case <-c.fail.done:
			return c.fail.err
		}
	}
	delay := time.Millisecond
	for {
		resp, err := c.dispatcher.GetClusterOverview(ctx, &jobplanev1.GetClusterOverviewRequest{})
		switch {
		case err == nil && int(resp.GetTaskExecutorCount()) >= n:
			return nil
		case connect.CodeOf(err) == connect.CodeUnauthenticated, connect.CodeOf(err) == connect.CodePermissionDenied:
			return nil
		}
		timer := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			timer.Stop()
			return errors.Join(ctx.Err(), err)
		case <-c.fail.done:
			timer.Stop()
			return c.fail.err
		case <-timer.C:
		}
		delay = min(2*delay, 20*time.Millisecond)
	}
}

func (c *Cluster) urls() []string {
	urls := make([]string, len(c.jms))
	for i, jm := range c.jms {
		urls[i] = jm.url
	}
	return urls
}

// URL returns the base URL of the cluster's first JobManager, such as
// "http://127.0.0.1:41235", which leads once Start returned: any jobplane
// client (the SDK, a client generated from the contract, curl) reaches
// the DispatcherService there, and a worker process the cluster's HA
// store (HAStoreService), through which it joins the cluster.
func (c *Cluster) URL() string { return c.jms[0].url }

// Client returns the SDK client of the cluster, for everything beyond
// Execute: Submit, Watch, Cancel, List, and so on. It knows every
// JobManager and follows the leader. It is the cluster's own: Close
// closes it.
func (c *Cluster) Client() *sdk.Client { return c.client }

// Dispatcher returns a client of the first JobManager's DispatcherService
// (JobManagers()[0].Dispatcher()): generated from the contract, it
// neither retries nor follows the leader, so a test sees each answer as
// the server gave it.
func (c *Cluster) Dispatcher() jobplanev1connect.DispatcherServiceClient { return c.dispatcher }

// HTTPClient returns the HTTP client behind Dispatcher, for other
// clients generated from the contract (of the ResourceManager, say). Close
// closes its idle connections.
func (c *Cluster) HTTPClient() *http.Client { return c.http }

// Store returns the cluster's HA store, as the TaskExecutors and every
// JobManager but a wrapped first one (Config.WrapStore) use it: a test
// reads what the cluster wrote, or writes behind its back.
func (c *Cluster) Store() hastore.Store { return c.store }

// JobManagers returns the cluster's JobManagers, in start order: the
// first led when Start returned.
func (c *Cluster) JobManagers() []*JobManager { return c.jms }

// TaskExecutors returns the cluster's TaskExecutors, in start order.
func (c *Cluster) TaskExecutors() []*TaskExecutor { return c.tes }

// Tasks returns the record of the task calls at every TaskExecutor of
// the cluster.
func (c *Cluster) Tasks() *TaskLog { return c.tasks }

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

// Close stops the cluster: the JobManagers resign first, so that their
// jobs are handed over (suspended) rather than failed, then the
// TaskExecutors cancel their tasks, the endpoints close and the store
// stops; the temporary data directory, if the cluster made one, is
// removed. It returns once every goroutine the cluster started has ended,
// with the errors that stopped its components, if any. Later calls
// return the same error and do nothing more.
func (c *Cluster) Close() error {
	c.closeOnce.Do(func() {
		if c.client != nil {
			c.client.Close()
		}
		var errs []error
		// The endpoints outlive the components, so that the components'
		// last calls to each other (a final task report, say) still land.
		// Each component's connections close once it stopped: the
		// endpoints at their other ends would wait for them as they shut
		// down.
		for _, jm := range c.jms {
			errs = append(errs, jm.run.stop())
			jm.client.CloseIdleConnections()
		}
		for _, te := range c.tes {
			errs = append(errs, te.run.stop())
			te.client.CloseIdleConnections()
		}
		c.http.CloseIdleConnections()
		for _, jm := range c.jms {
			errs = append(errs, jm.serve.stop())
		}
		if c.closeStore != nil {
			errs = append(errs, c.closeStore())
		}
		if c.tempDir != "" {
			errs = append(errs, os.RemoveAll(c.tempDir))
		}
		c.closeErr = errors.Join(errs...)
	})
	return c.closeErr
}

package standalone

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/oklog/run"

	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
	"github.com/jobplane/jobplane/sdk/jobgraph"
	"github.com/jobplane/jobplane/sdk/taskexecutor"
	"github.com/jobplane/jobplane/sdk/wire/transport"
	"github.com/jobplane/jobplane/server/component"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/hastore/etcdstore"
	"github.com/jobplane/jobplane/server/internal/endpoint"
	"github.com/jobplane/jobplane/server/internal/jobmanager"
)

// Defaults of Config.
const (
	// DefaultListen is the default of Config.Listen: a free loopback port.
	DefaultListen = "127.0.0.1:0"
	// DefaultShutdownTimeout is the default of Config.ShutdownTimeout.
	DefaultShutdownTimeout = 5 * time.Second
	// DefaultStoreOpenTimeout is the default of Config.StoreOpenTimeout.
	DefaultStoreOpenTimeout = time.Minute
	// DefaultSlotTimeout is the default of Config.SlotTimeout.
	DefaultSlotTimeout = 5 * time.Minute
)

// Config configures a standalone cluster. The zero value of every field
// but Store is usable; Store needs a data directory or etcd endpoints.
type Config struct {
	// Listen is the TCP address on which the JobManager serves Connect,
	// gRPC and gRPC-Web (HTTP/1.1 and h2c, or TLS with TLSCertFile), and
	// the HA store as HAStoreService. Port 0 picks a free port; Cluster.URL reports it.
	// Default: DefaultListen.
	Listen string
	// Advertise is the base URL at which other processes and clients
	// reach the JobManager, which it publishes as its address (see
	// endpoint.Config.Advertise in the server): "http://host1:8080", say.
	// Required when Listen is on every interface ("0.0.0.0:8080"); the
	// in-process TaskExecutors keep their loopback addresses, since only
	// the JobManager in the same process calls them. Default: "http://"
	// and the bound address.
	Advertise string
	// TLSCertFile and TLSKeyFile, when set (both or neither), name the
	// PEM certificate and key with which the JobManager's listener serves
	// TLS (HTTP/2 or HTTP/1.1 by ALPN) instead of HTTP/1.1 and h2c; its
	// URL is then "https://". The in-process TaskExecutors keep their
	// loopback listeners in the clear. Default: none.
	TLSCertFile, TLSKeyFile string
	// TLSClientConfig is the TLS configuration of the components' calls
	// to https:// URLs: the TaskExecutors' calls to the JobManager when it
	// serves TLS. Its RootCAs must trust the certificate of TLSCertFile
	// (see endpoint.ClientTLSConfig in the server). Default: nil, the
	// system's roots.
	TLSClientConfig *tls.Config
	// ClientCAFile, when set (with TLSCertFile), names the PEM authorities
	// that sign the cluster's client certificates: the JobManager's
	// listener then serves its cluster services (HA store, ResourceManager,
	// JobMaster) only to callers presenting a certificate they signed,
	// while the Dispatcher stays open to any TLS client (see
	// endpoint.Config.ClientCAFile). Default: none.
	ClientCAFile string
	// ClientTLS, when set, is used for the components' calls instead of
	// TLSClientConfig: it trusts its CA file and presents its certificate
	// (TLSCertFile's, for ClientCAFile), reading them again when they
	// change. Default: nil.
	ClientTLS *endpoint.ClientTLS
	// ClusterListen, when set, is the TCP address on which the cluster
	// protocol (HA store, ResourceManager, JobMasters) is served apart from
	// the public API on Listen, with the same TLS; ClusterAdvertise and
	// ClusterAddrFile are to it what Advertise and AddrFile are to Listen
	// (see endpoint.Endpoint.SetCluster). Default: none, one listener.
	ClusterListen, ClusterAdvertise, ClusterAddrFile string
	// AddrFile, when set, names a file into which the bound address is
	// written once the listener is open. Default: none.
	AddrFile string
	// ShutdownTimeout bounds how long in-flight requests get to finish on
	// shutdown, on every listener of the cluster. Default:
	// DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
	// MaxRequestBytes and MaxResponseBytes bound the requests the
	// listeners read and the messages they send. Defaults: 4 MiB and
	// 16 MiB.
	MaxRequestBytes, MaxResponseBytes int64

	// Store says where the HA store keeps its data: an embedded etcd
	// member on Store.DataDir, or the external etcd cluster at
	// Store.Endpoints (exactly one of them is required). Its Logger
	// defaults to Config.Logger.
	Store etcdstore.OpenConfig
	// StoreOpenTimeout bounds opening the store. Default:
	// DefaultStoreOpenTimeout.
	StoreOpenTimeout time.Duration

	// SessionTTL, HeartbeatInterval and HeartbeatTimeout are the
	// JobManager's timings (see jobmanager.Config in the server). Defaults:
	// 10s, 1s and 6s. The timeout must be at least twice the interval and
	// less than two thirds of the TTL.
	SessionTTL, HeartbeatInterval, HeartbeatTimeout time.Duration
	// TaskLease is the JobManager's (jobmanager.Config.TaskLease).
	TaskLease time.Duration
	// MaxSubtasks is the largest number of subtasks a job may have.
	// Default: jobgraph.DefaultMaxSubtasks.
	MaxSubtasks int
	// MaxJobs and MaxClusterSubtasks bound the cluster's live jobs (not
	// yet globally terminal) and their subtasks in all: a new job over
	// either is refused with RESOURCE_EXHAUSTED (TOO_MANY_JOBS,
	// TOO_MANY_SUBTASKS). Zero: no limit (the default).
	MaxJobs, MaxClusterSubtasks int
	// AdmissionWindow bounds the jobs launched at once that wait for
	// their first slots; see dispatcher.Config. Zero: the default
	// (dispatcher.DefaultAdmissionWindow); negative: no window.
	AdmissionWindow int
	// DispatcherOptions are added to the public API's handler
	// (DispatcherService), in order: authentication and authorization,
	// then per-client limits. Default: none.
	DispatcherOptions []connect.HandlerOption
	// ResultRetention, when positive, deletes job results this long after
	// their job ended. Default: keep them.
	ResultRetention time.Duration
	// SlotTimeout bounds how long a job's region waits for slots before
	// its deployment fails. Default: DefaultSlotTimeout.
	SlotTimeout time.Duration
	// SlotYield is how long a job's region waits for slots while the job
	// holds idle ones before it gives those back (and again after twice
	// as long, and so on).
	// Default: 5s; negative: never.
	SlotYield time.Duration

	// TaskExecutors is the number of TaskExecutors to run, each on a
	// loopback port of its own. Zero runs none (a JobManager alone, which
	// TaskExecutors in other processes join through the store).
	TaskExecutors int
	// Slots is the number of slots per TaskExecutor. Default: 1.
	Slots int
	// Invokables are offered by every TaskExecutor besides the built-ins
	// (noop, sleep, fail, count, and exec with AllowExec); a name given
	// here replaces a built-in.
	Invokables map[string]taskexecutor.Invokable
	// AllowExec makes the TaskExecutors offer the built-in exec, which
	// runs commands. Default: false: exec is not offered, and a job that
	// needs it is refused at submission (INVOKABLE_NOT_OFFERED).
	AllowExec bool
	// Exec says where, as whom and with what environment exec runs
	// commands on every TaskExecutor (see taskexecutor.ExecConfig).
	Exec taskexecutor.ExecConfig
	// CancelGrace is how long a canceled task gets to stop before it is
	// killed. Default: taskexecutor.DefaultCancelGrace.
	CancelGrace time.Duration
	// AttemptLog, if set, receives a JSON line whenever an execution
	// attempt starts or stops running on one of the TaskExecutors.
	AttemptLog io.Writer
	// OutputDir, if set, is where the TaskExecutors keep their attempts'
	// output, each in a directory of its own under it (te-0, te-1, ...),
	// so that a process restarted on the same data directory (whose
	// TaskExecutors keep their ids) serves the output of the attempts
	// that ended before. Default: none, output is kept in memory (see
	// taskexecutor.Config.OutputDir).
	OutputDir string
	// OutputMaxAge is how long an ended attempt's output is kept in
	// OutputDir. Default: taskexecutor.DefaultOutputDiskRetention.
	OutputMaxAge time.Duration
	// OutputMaxBytes bounds the bytes all the TaskExecutors' output takes
	// in OutputDir, each TaskExecutor getting an equal share. Default:
	// taskexecutor.DefaultOutputMaxBytes.
	OutputMaxBytes int64

	// Logger receives the logs of every component. Default:
	// slog.Default().
	Logger *slog.Logger
	// Metrics, if set, is served as GET /metrics on Listen beside the RPC
	// services: the jobplane server's metrics in the Prometheus format,
	// as its process's telemetry setup serves them. Default: none (404).
	Metrics http.Handler
}

// Validate reports whether the configuration can be used, before
// anything is opened.
func (c Config) Validate() error {
	var errs []error
	if c.TaskExecutors < 0 {
		errs = append(errs, errors.New("standalone: the number of TaskExecutors must not be negative"))
	}
	if c.Slots < 0 {
		errs = append(errs, errors.New("standalone: slots must not be negative"))
	}
	if c.MaxSubtasks < 0 || c.MaxJobs < 0 || c.MaxClusterSubtasks < 0 {
		errs = append(errs, errors.New("standalone: the job and subtask limits must not be negative"))
	}
	if c.OutputMaxBytes < 0 {
		errs = append(errs, errors.New("standalone: output max bytes must not be negative"))
	}
	if c.ShutdownTimeout < 0 || c.StoreOpenTimeout < 0 || c.SlotTimeout < 0 || c.ResultRetention < 0 || c.CancelGrace < 0 || c.OutputMaxAge < 0 {
		errs = append(errs, errors.New("standalone: durations must not be negative"))
	}
	if err := c.Store.Validate(); err != nil {
		errs = append(errs, err)
	}
	listen := cmp.Or(c.Listen, DefaultListen)
	if err := (endpoint.Config{Listen: listen, Advertise: c.Advertise, TLSCertFile: c.TLSCertFile, TLSKeyFile: c.TLSKeyFile, ClientCAFile: c.ClientCAFile}).Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.jobManager(nil, nil).ValidateTimings(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (c Config) withDefaults() Config {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	if c.StoreOpenTimeout == 0 {
		c.StoreOpenTimeout = DefaultStoreOpenTimeout
	}
	if c.MaxSubtasks == 0 {
		c.MaxSubtasks = jobgraph.DefaultMaxSubtasks
	}
	if c.SlotTimeout == 0 {
		c.SlotTimeout = DefaultSlotTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Store.Logger == nil {
		c.Store.Logger = c.Logger
	}
	return c
}

// jobManager is the JobManager's configuration.
func (c Config) jobManager(st hastore.Store, client *http.Client) jobmanager.Config {
	return jobmanager.Config{
		Store: st, HTTPClient: client,
		SessionTTL: c.SessionTTL, HeartbeatInterval: c.HeartbeatInterval, HeartbeatTimeout: c.HeartbeatTimeout, TaskLease: c.TaskLease,
		ResultRetention: c.ResultRetention, SlotTimeout: c.SlotTimeout, SlotYield: c.SlotYield, Logger: c.Logger,
		Limits:  jobgraph.Limits{MaxSubtasks: c.MaxSubtasks},
		MaxJobs: c.MaxJobs, MaxClusterSubtasks: c.MaxClusterSubtasks, AdmissionWindow: c.AdmissionWindow, DispatcherOptions: c.DispatcherOptions,
	}
}

// Cluster is a standalone cluster: opened by New, served by Run.
type Cluster struct {
	cfg   Config
	log   *slog.Logger
	store *etcdstore.Store
	ep    *endpoint.Endpoint
	// jobManager and components (the TaskExecutors, each with its own
	// endpoint) each have a blocking Run; servers are the Run of the
	// process's endpoint; clients are the HTTP clients they call each
	// other with. tes are the TaskExecutors, closed by Close if Run never
	// starts.
	jobManager func(context.Context) error
	components []func(context.Context) error
	servers    []func(context.Context) error
	clients    []*http.Client
	tes        []*component.TaskExecutor

	mu     sync.Mutex
	ran    bool // Run was called: it owns the listeners and the store
	closed bool
}

// New opens a cluster: its listeners and its HA store, and builds its
// components; nothing is served until Run. It fails if the configuration
// is invalid, an address cannot be bound, or the store cannot be opened
// (within Config.StoreOpenTimeout or ctx). Whatever New opened is closed
// by Run when it returns, or by Close if Run is never called.
func New(ctx context.Context, cfg Config) (_ *Cluster, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	c := &Cluster{cfg: cfg, log: cfg.Logger}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	epCfg := c.endpointConfig(cfg.Listen, cfg.AddrFile)
	epCfg.Advertise = cfg.Advertise
	epCfg.TLSCertFile, epCfg.TLSKeyFile = cfg.TLSCertFile, cfg.TLSKeyFile
	epCfg.ClientCAFile, epCfg.PublicServices = cfg.ClientCAFile, []string{jobplanev1connect.DispatcherServiceName}
	c.ep, err = endpoint.Listen(epCfg, c.log)
	if err != nil {
		return nil, err
	}
	if cfg.ClusterListen != "" {
		clusterCfg := epCfg
		clusterCfg.Listen, clusterCfg.Advertise, clusterCfg.AddrFile, clusterCfg.PublicServices = cfg.ClusterListen, cfg.ClusterAdvertise, cfg.ClusterAddrFile, nil
		cluster, err := endpoint.Listen(clusterCfg, c.log.With("surface", "cluster"))
		if err != nil {
			return nil, fmt.Errorf("standalone: cluster listener: %w", err)
		}
		c.ep.SetCluster(cluster)
	}
	octx, cancel := context.WithTimeout(ctx, cfg.StoreOpenTimeout)
	defer cancel()
	c.store, err = etcdstore.Open(octx, cfg.Store)
	if err != nil {
		return nil, fmt.Errorf("standalone: open ha store: %w", err)
	}
	if cfg.Store.DataDir != "" {
		c.log.Info("ha store on embedded etcd", "data_dir", cfg.Store.DataDir, "prefix", prefix(cfg.Store.Prefix))
	} else {
		c.log.Info("ha store on external etcd", "endpoints", cfg.Store.Endpoints, "prefix", prefix(cfg.Store.Prefix))
	}
	// The cluster's own store, served for TaskExecutors (and other
	// processes) that reach it over the network.
	component.ServeStore(c.ep, c.store, c.log)

	if cfg.Metrics != nil {
		c.ep.Handle("GET /metrics", cfg.Metrics)
	}

	jm, err := component.NewJobManager(c.ep, cfg.jobManager(c.store, c.newClient()))
	if err != nil {
		return nil, err
	}
	// The JobManager campaigns for the cluster's leadership and, while it
	// leads, runs the Dispatcher and the ResourceManager.
	c.jobManager = jm.Run

	ids, err := taskExecutorIDs(cfg.Store.DataDir, cfg.TaskExecutors)
	if err != nil {
		return nil, fmt.Errorf("standalone: TaskExecutor ids: %w", err)
	}
	for i, id := range ids {
		if err := c.addTaskExecutor(i, id); err != nil {
			return nil, fmt.Errorf("standalone: TaskExecutor: %w", err)
		}
	}
	// The JobManager's endpoint serves the services mounted above until
	// the components stopped, then drains in-flight requests.
	c.servers = append(c.servers, c.ep.Run)
	return c, nil
}

// newClient returns a new HTTP client for components' calls to each
// other, whose idle connections Run closes once the components stopped.
func (c *Cluster) newClient() *http.Client {
	client := transport.NewClient(c.cfg.TLSClientConfig)
	if c.cfg.ClientTLS != nil {
		client = c.cfg.ClientTLS.NewClient()
	}
	c.clients = append(c.clients, client)
	return client
}

func prefix(p string) string {
	if p == "" {
		return etcdstore.DefaultPrefix
	}
	return p
}

func (c *Cluster) endpointConfig(listen, addrFile string) endpoint.Config {
	return endpoint.Config{
		Listen: listen, AddrFile: addrFile, ShutdownTimeout: c.cfg.ShutdownTimeout,
		MaxRequestBytes: c.cfg.MaxRequestBytes, MaxResponseBytes: c.cfg.MaxResponseBytes,
	}
}

// addTaskExecutor builds TaskExecutor id ("": a random one), the i-th,
// on a loopback endpoint of its own.
func (c *Cluster) addTaskExecutor(i int, id string) error {
	tcfg := taskexecutor.Config{
		ID: id, Slots: c.cfg.Slots, Store: c.store, HTTPClient: c.newClient(), ClientOptions: endpoint.ClientOptions(),
		Invokables: c.cfg.Invokables, AllowExec: c.cfg.AllowExec, Exec: c.cfg.Exec, CancelGrace: c.cfg.CancelGrace, AttemptLog: c.cfg.AttemptLog, Logger: c.log,
	}
	if c.cfg.OutputDir != "" {
		// By position, as the ids on a data directory are: the i-th
		// TaskExecutor finds its predecessor's output.
		tcfg.OutputDir = filepath.Join(c.cfg.OutputDir, fmt.Sprintf("te-%d", i))
		tcfg.OutputRetention = c.cfg.OutputMaxAge
		maxBytes := c.cfg.OutputMaxBytes
		if maxBytes == 0 {
			maxBytes = taskexecutor.DefaultOutputMaxBytes
		}
		tcfg.OutputMaxBytes = max(maxBytes/int64(max(c.cfg.TaskExecutors, 1)), 1)
	}
	te, err := component.NewTaskExecutor(component.TaskExecutorConfig{
		Endpoint:     c.endpointConfig("127.0.0.1:0", ""),
		TaskExecutor: tcfg,
	})
	if err != nil {
		return err
	}
	c.tes = append(c.tes, te)
	// The TaskExecutor registers with the ResourceManager leader and runs
	// tasks; its endpoint serves until it stopped.
	c.components = append(c.components, te.Run)
	return nil
}

// URL returns the base URL of the cluster's JobManager, such as
// "http://127.0.0.1:41235" ("https://" with TLS), where clients reach
// the DispatcherService: Config.Advertise, or the bound address.
func (c *Cluster) URL() string { return c.ep.URL() }

// ClusterURL returns the base URL at which the cluster protocol is
// served: that of Config.ClusterListen, or else URL.
func (c *Cluster) ClusterURL() string { return c.ep.ClusterURL() }

// TaskExecutorIDs returns the ids of the cluster's TaskExecutors, in start
// order.
func (c *Cluster) TaskExecutorIDs() []string {
	ids := make([]string, len(c.tes))
	for i, te := range c.tes {
		ids[i] = te.ID()
	}
	return ids
}

// Run serves the cluster until ctx ends or a component fails, then stops
// it: first the components (the JobManager resigns its leadership,
// TaskExecutors cancel their tasks and report their ends) while the
// endpoints still serve them, then the endpoints, which drain in-flight
// requests for up to Config.ShutdownTimeout; last the store closes. It
// returns nil after a stop caused by ctx, or the error of the component
// or endpoint that failed. Run must be called at most once.
func (c *Cluster) Run(ctx context.Context) error {
	c.mu.Lock()
	if c.ran || c.closed {
		c.mu.Unlock()
		return errors.New("standalone: Run called twice or after Close")
	}
	c.ran = true
	c.mu.Unlock()
	defer c.closeStore()

	// The endpoints outlive the components, so that the components'
	// last calls to each other (a final task report, say) still land.
	sctx, stopServing := context.WithCancel(context.WithoutCancel(ctx))
	defer stopServing()
	served := make(chan error, len(c.servers))
	for _, serve := range c.servers {
		go func() { served <- serve(sctx) }()
	}
	endpointFailed := false // read once g.Run returned, after the actor ended

	var g run.Group
	// The TaskExecutors stop only once the JobManager did: it resigns
	// first, so that its jobs are handed over (suspended) rather than
	// failed by their tasks' stop.
	jmCtx, stopJM := context.WithCancel(ctx)
	jmDone := make(chan struct{})
	g.Add(func() error { defer close(jmDone); return c.jobManager(jmCtx) }, func(error) { stopJM() })
	for _, component := range c.components {
		cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		g.Add(func() error { return component(cctx) }, func(error) {
			go func() { <-jmDone; cancel() }()
		})
	}
	// The caller's context, or an endpoint that fails, stops every
	// component.
	stop := make(chan struct{})
	g.Add(func() error {
		select {
		case <-ctx.Done():
			return nil
		case err := <-served:
			endpointFailed = true
			return err
		case <-stop:
			return nil
		}
	}, func(error) { close(stop) })
	err := g.Run()

	// Connections between components are idle now: closing them lets the
	// endpoints shut down at once instead of waiting for the peers.
	for _, client := range c.clients {
		client.CloseIdleConnections()
	}
	stopServing()
	remaining := len(c.servers)
	if endpointFailed {
		remaining--
	}
	for range remaining {
		if serr := <-served; serr != nil {
			err = errors.Join(err, serr)
		}
	}
	return err
}

// Close releases what New opened, for a cluster whose Run was never
// called; after Run, it does nothing.
func (c *Cluster) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ran || c.closed {
		return nil
	}
	c.closed = true
	var errs []error
	if c.ep != nil {
		errs = append(errs, c.ep.Close())
	}
	for _, te := range c.tes {
		errs = append(errs, te.Close())
	}
	if c.store != nil {
		errs = append(errs, c.store.Close())
	}
	return errors.Join(errs...)
}

// closeStore closes the store once Run's components have stopped.
func (c *Cluster) closeStore() {
	if err := c.store.Close(); err != nil {
		c.log.Warn("closing the ha store failed", "err", err)
	}
}

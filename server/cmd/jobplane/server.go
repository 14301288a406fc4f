package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"syscall"
	"time"

	"github.com/jobplane/jobplane/conformance/invokable"

	"connectrpc.com/connect"
	"github.com/oklog/run"

	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/sdk/jobgraph"
	"github.com/jobplane/jobplane/sdk/taskexecutor"
	"github.com/jobplane/jobplane/server/component"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/internal/endpoint"
	"github.com/jobplane/jobplane/server/internal/jobmanager"
)

// listenFlags configure a process's RPC endpoint, and the TLS of its
// calls to other processes.
type listenFlags struct {
	cfg      endpoint.Config
	caFile   string
	security securityFlags
}

func (l *listenFlags) register(fs *flag.FlagSet, def string) {
	fs.StringVar(&l.cfg.Listen, "listen", def, "address to serve Connect, gRPC and gRPC-Web on (HTTP/1.1 and h2c, or TLS with -tls-cert); port 0 picks a free port; an address on every interface (0.0.0.0:P, [::]:P, :P) needs -advertise")
	fs.StringVar(&l.cfg.Advertise, "advertise", "", "base URL at which other processes and clients reach this process, such as http://host1:8080 (http:// or https://, a host and a port, nothing else): the address it publishes, "+
		"a jobmanager's in its leader record, its JobMasters' addresses and the leader named in NOT_LEADER answers, a TaskExecutor's in its registration; "+
		"needed when -listen binds every interface, or when others reach this process under another name or port than it binds (a proxy, NAT, a container) (default http:// and the bound address)")
	fs.StringVar(&l.cfg.TLSCertFile, "tls-cert", "", "PEM certificate (chain) to serve TLS with (with -tls-key): the endpoint then serves TLS only, HTTP/2 or HTTP/1.1 by ALPN, and its URL is https://; "+
		"the certificate must name the host others reach the process at (-advertise, or the -listen address, which may be an IP address)")
	fs.StringVar(&l.cfg.TLSKeyFile, "tls-key", "", "PEM private key of -tls-cert")
	fs.StringVar(&l.caFile, "tls-ca", "", "PEM file of the certificate authorities to trust, instead of the system's, in this process's calls to https:// peers "+
		"(other jobmanagers, TaskExecutors, the HA store, and its own URL): set it wherever the cluster's certificates are not signed by a system-trusted authority")
	fs.StringVar(&l.cfg.AddrFile, "listen-addr-file", "", "write the bound address to this file once listening")
	fs.DurationVar(&l.cfg.ShutdownTimeout, "shutdown-timeout", 5*time.Second, "how long in-flight requests get to finish on shutdown")
	fs.Int64Var(&l.cfg.MaxResponseBytes, "max-response-bytes", endpoint.DefaultMaxResponseBytes, "largest response message the server sends; a larger answer fails with RESOURCE_EXHAUSTED (lists and a job's subtasks are paged well below it)")
	fs.Int64Var(&l.cfg.MaxRequestBytes, "max-request-bytes", endpoint.DefaultMaxRequestBytes, "largest request body, and largest request message once decompressed, that the server reads; larger requests get RESOURCE_EXHAUSTED unread (keep it above -max-plan-bytes, with room for JSON)")
	l.security.register(fs, &l.cfg)
}

// validate checks the flags, and reads the TLS files they name, before
// anything is opened; it explains a missing -advertise or half a TLS pair
// in the flags' terms.
func (l *listenFlags) validate() error {
	switch {
	case l.cfg.TLSCertFile != "" && l.cfg.TLSKeyFile == "":
		return errors.New("-tls-cert needs -tls-key, the certificate's private key")
	case l.cfg.TLSKeyFile != "" && l.cfg.TLSCertFile == "":
		return errors.New("-tls-key needs -tls-cert, the certificate of the key")
	}
	err := l.cfg.Validate()
	if errors.Is(err, endpoint.ErrAdvertiseRequired) {
		scheme := "http"
		if l.cfg.TLSCertFile != "" {
			scheme = "https"
		}
		return fmt.Errorf("-listen %s binds every interface, an address no one can reach: set -advertise to the base URL that other processes and clients reach this process at (such as %s://host1:8080)", l.cfg.Listen, scheme)
	}
	if err != nil {
		return err
	}
	return l.security.check(&l.cfg, l.caFile)
}

// newClient returns an HTTP client for the process's calls to other
// processes, trusting -tls-ca for https:// peers and presenting -tls-cert
// to those that ask for a client certificate.
func (l *listenFlags) newClient() *http.Client { return l.security.files.NewClient() }

// jobManagerFlags tune a JobManager.
type jobManagerFlags struct {
	maxSubtasks       int
	sessionTTL        time.Duration
	heartbeatInterval time.Duration
	heartbeatTimeout  time.Duration
	taskLease         leaseFlag
	resultRetention   time.Duration
	slotTimeout       time.Duration
	slotYield         time.Duration
	limits            limitFlags
	// dispatcherOptions are added to the public API's handler
	// (authentication, see authFlags).
	dispatcherOptions []connect.HandlerOption
}

// slotYieldConfig is -slot-yield as jobmanager.Config takes it: 0 (never)
// is negative there.
func (j *jobManagerFlags) slotYieldConfig() time.Duration {
	if j.slotYield == 0 {
		return -1
	}
	return j.slotYield
}

func (j *jobManagerFlags) register(fs *flag.FlagSet) {
	fs.DurationVar(&j.sessionTTL, "session-ttl", jobmanager.DefaultSessionTTL, "TTL of the process's HA-store session: how long a dead leader holds on")
	fs.DurationVar(&j.heartbeatInterval, "heartbeat-interval", jobmanager.DefaultHeartbeatInterval, "how often TaskExecutors heart-beat and JobMasters probe them")
	fs.DurationVar(&j.heartbeatTimeout, "heartbeat-timeout", jobmanager.DefaultHeartbeatTimeout,
		"how long a TaskExecutor may stay silent before its slots are released, and a JobMaster before its TaskExecutors stop its tasks; at least twice -heartbeat-interval and less than two thirds of -session-ttl")
	fs.Var(&j.taskLease, "task-lease",
		"keep running tasks across a change of leader: TaskExecutors keep a job's tasks running this long without hearing from any JobMaster of it, and a new leader adopts them instead of deploying them again; the subtasks of a TaskExecutor that dies outright are deployed elsewhere only after this long. At least -heartbeat-timeout, the same on every jobmanager of the cluster (default: 10s, or twice -session-ttl if longer; 0: off, tasks stop with their leader)")
	fs.IntVar(&j.maxSubtasks, "max-subtasks-per-job", jobgraph.DefaultMaxSubtasks, "largest number of subtasks (the sum of a job's parallelisms) a job may have; larger jobs are refused at submission")
	fs.DurationVar(&j.slotTimeout, "slot-timeout", 5*time.Minute, "how long a job's region may wait for the slots it needs before its deployment fails (and counts against the job's restart strategy)")
	fs.DurationVar(&j.slotYield, "slot-yield", 5*time.Second, "how long a job's region may wait for slots while the job holds idle ones before it gives those back (and again after twice as long, and so on), so that jobs holding part of what each needs do not wait for one another (0: never)")
	fs.DurationVar(&j.resultRetention, "result-retention", 0, "delete job results this long after their job ended (0 keeps them); while a result exists, its job id never runs again (unless a client purges it, or resubmits with id reuse allowed)")
	j.limits.register(fs)
}

// leaseFlag is -task-lease: a duration, or unset (the lease then follows
// the other timings: jobmanager.AutoTaskLease).
type leaseFlag struct {
	d   time.Duration
	set bool
}

func (f *leaseFlag) String() string {
	if f == nil || !f.set {
		return "auto"
	}
	return f.d.String()
}

func (f *leaseFlag) Set(v string) error {
	d, err := time.ParseDuration(v)
	if err != nil {
		return err
	}
	f.d, f.set = d, true
	return nil
}

// lease is the task lease the flags ask for.
func (j *jobManagerFlags) lease() time.Duration {
	if j.taskLease.set {
		return j.taskLease.d
	}
	return jobmanager.AutoTaskLease(j.sessionTTL, j.heartbeatTimeout)
}

// validate checks the flags before anything is opened.
func (j *jobManagerFlags) validate() error {
	if j.maxSubtasks < 1 {
		return errors.New("-max-subtasks-per-job must be at least 1")
	}
	if err := j.limits.validate(); err != nil {
		return err
	}
	return jobmanager.Config{SessionTTL: j.sessionTTL, HeartbeatInterval: j.heartbeatInterval, HeartbeatTimeout: j.heartbeatTimeout, TaskLease: j.lease()}.ValidateTimings()
}

// taskExecutorFlags tune TaskExecutors.
type taskExecutorFlags struct {
	slots          int
	allowExec      bool
	cancelGrace    time.Duration
	attemptLogPath string
	attemptLog     io.Writer // opened by openAttemptLog
	exec           execFlags
	output         outputFlags
	// suite offers the conformance suite's invokables (only `jobplane
	// taskexecutor` registers its flag).
	suite bool
}

func (t *taskExecutorFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&t.slots, "slots", 4, "slots per TaskExecutor")
	fs.BoolVar(&t.allowExec, "allow-exec", false, "offer the built-in exec invokable, which runs commands (without it, exec is not offered at all)")
	fs.DurationVar(&t.cancelGrace, "cancel-grace", taskexecutor.DefaultCancelGrace, "how long a canceled task gets to stop before it is killed (an exec task's process group gets SIGTERM, then SIGKILL)")
	t.exec.register(fs)
	fs.StringVar(&t.attemptLogPath, "attempt-log", "", "append a JSON line to this file whenever an execution attempt starts or stops running here")
	t.output.register(fs)
}

// invokables are the invokables the flags add to the built-ins: the
// conformance suite's with -conformance-invokables, else none.
func (t *taskExecutorFlags) invokables() map[string]taskexecutor.Invokable {
	if !t.suite {
		return nil
	}
	return invokable.Suite()
}

// openAttemptLog opens the -attempt-log file, if one is named; close
// closes it.
func (t *taskExecutorFlags) openAttemptLog() (close func(), err error) {
	if t.attemptLogPath == "" {
		return func() {}, nil
	}
	f, err := os.OpenFile(t.attemptLogPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("attempt log: %w", err)
	}
	t.attemptLog = f
	return func() { f.Close() }, nil
}

// group is the run.Group of a server process, with its signal handler.
type group struct {
	run.Group
	ctx context.Context
}

func newGroup(ctx context.Context) *group {
	g := &group{ctx: ctx}
	// Signals: SIGINT or SIGTERM starts a graceful shutdown of every actor.
	g.Add(run.SignalHandler(ctx, os.Interrupt, syscall.SIGTERM))
	return g
}

// actor adds a component with a blocking Run(ctx) error to the group.
func (g *group) actor(runFn func(context.Context) error) {
	ctx, cancel := context.WithCancel(g.ctx)
	g.Add(func() error { return runFn(ctx) }, func(error) { cancel() })
}

// exitCode maps the group's outcome to an exit code.
func exitCode(log *slog.Logger, err error) int {
	if errors.Is(err, run.ErrSignal) {
		log.Info("shut down", "cause", err.Error())
		return exitOK
	}
	log.Error("stopped", "err", err)
	return exitError
}

// runServer runs a server process: its endpoint and HA store (see
// openServer), what add puts into the run group, the endpoint itself and
// the debug listener if one is asked for, until a signal or a failure; it
// returns the exit code.
func runServer(log *slog.Logger, service string, listen listenFlags, store storeFlags, debug debugFlags, add func(g *group, ep *endpoint.Endpoint, st hastore.Store) error) int {
	tel, err := setupTelemetry(service, log)
	if err != nil {
		log.Error("cannot start", "err", err)
		return exitError
	}
	defer tel.shutdown()
	ep, st, err := openServer(listen, store, log)
	if err != nil {
		log.Error("cannot start", "err", err)
		return exitError
	}
	defer st.Close()
	ep.Handle("GET /metrics", tel.MetricsHandler())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g := newGroup(ctx)
	if err := addDebug(g, debug, listen.cfg.ShutdownTimeout, log); err != nil {
		ep.Close()
		log.Error("cannot start", "err", err)
		return exitError
	}
	if err := add(g, ep, st); err != nil {
		log.Error("cannot start", "err", err)
		return exitError
	}
	// The RPC endpoint: serves until interrupted, then drains in-flight
	// requests for up to -shutdown-timeout.
	g.actor(ep.Run)
	return exitCode(log, g.Run())
}

// addDebug opens the debug listener, if -debug-listen asks for one, and
// runs it in the group.
func addDebug(g *group, debug debugFlags, shutdownTimeout time.Duration, log *slog.Logger) error {
	srv, err := debug.open(log, shutdownTimeout)
	if err != nil || srv == nil {
		return err
	}
	// The debug listener: serves the profiler until interrupted, then gives
	// profiles still being taken up to -shutdown-timeout.
	g.actor(srv.Run)
	return nil
}

// openServer opens the endpoint and the HA store of a server process, and
// serves a store of its own on the endpoint as HAStoreService, so that
// TaskExecutors and other processes can use it (a remote store is served
// by its own process). The caller closes the store.
func openServer(listen listenFlags, store storeFlags, log *slog.Logger) (*endpoint.Endpoint, hastore.Store, error) {
	ep, err := listen.security.listen(listen.cfg, log)
	if err != nil {
		return nil, nil, err
	}
	st, err := store.open(context.Background(), listen.newClient(), log)
	if err != nil {
		ep.Close()
		return nil, nil, err
	}
	if store.hastoreURL == "" {
		component.ServeStore(ep, st, log)
		return ep, st, nil
	}
	// A remote store is served by its own process; this one relays the
	// leader (ObserveLeader) from it, so that TaskExecutors can follow the
	// leader through any process of the cluster.
	if err := component.RelayLeader(ep, []string{store.hastoreURL}, listen.newClient(), log); err != nil {
		ep.Close()
		st.Close()
		return nil, nil, err
	}
	return ep, st, nil
}

// addJobManager mounts a JobManager's services on ep and runs it; it
// calls other processes with client.
func addJobManager(g *group, ep *endpoint.Endpoint, st hastore.Store, client *http.Client, flags jobManagerFlags, log *slog.Logger) error {
	jm, err := component.NewJobManager(ep, jobmanager.Config{
		Store: st, HTTPClient: client,
		SessionTTL: flags.sessionTTL, HeartbeatInterval: flags.heartbeatInterval, HeartbeatTimeout: flags.heartbeatTimeout, TaskLease: flags.lease(),
		ResultRetention: flags.resultRetention, SlotTimeout: flags.slotTimeout, SlotYield: flags.slotYieldConfig(), Logger: log,
		Limits:  jobgraph.Limits{MaxSubtasks: flags.maxSubtasks},
		MaxJobs: flags.limits.maxJobs, MaxClusterSubtasks: flags.limits.maxClusterSubtasks, AdmissionWindow: flags.limits.window(), DispatcherOptions: append(flags.dispatcherOptions, flags.limits.options...),
	})
	if err != nil {
		return err
	}
	// The JobManager: campaigns for the cluster's leadership and, while
	// it leads, runs the Dispatcher and ResourceManager.
	g.actor(jm.Run)
	return nil
}

// addTaskExecutor runs a TaskExecutor on an endpoint of its own, which
// serves metrics too; it follows the ResourceManager's leader with
// leaders.
func addTaskExecutor(g *group, listen listenFlags, leaders election.Observer, flags taskExecutorFlags, metrics http.Handler, log *slog.Logger) error {
	te, err := component.NewTaskExecutor(component.TaskExecutorConfig{
		Endpoint: listen.cfg, Metrics: metrics,
		TaskExecutor: taskexecutor.Config{
			Slots: flags.slots, Store: leaders, HTTPClient: listen.newClient(), ClientOptions: endpoint.ClientOptions(),
			AllowExec: flags.allowExec, Exec: flags.exec.config(), CancelGrace: flags.cancelGrace, AttemptLog: flags.attemptLog, Logger: log,
			OutputDir: flags.output.dir, OutputRetention: flags.output.maxAge, OutputMaxBytes: flags.output.maxBytes,
			Invokables: flags.invokables(),
		},
	})
	if err != nil {
		return err
	}
	// The TaskExecutor and its endpoint: it registers with the
	// ResourceManager leader and runs tasks; on shutdown it stops them,
	// and then its endpoint drains.
	g.actor(te.Run)
	return nil
}

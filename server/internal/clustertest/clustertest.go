// Package clustertest starts whole jobplane clusters inside a test: an
// embedded etcd member, JobManagers and TaskExecutors, each on its own
// loopback port, talking through the generated Connect clients exactly as
// separate processes would.
package clustertest

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/jobplane/jobplane/gen/jobplane/cluster/v1/clusterv1connect"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/sdk/taskexecutor"
	"github.com/jobplane/jobplane/sdk/wire/transport"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/hastore/etcdstore"
	"github.com/jobplane/jobplane/server/internal/endpoint"
	"github.com/jobplane/jobplane/server/internal/jobmanager"
	"github.com/jobplane/jobplane/server/internal/jobmaster"
)

// Options shape a cluster.
type Options struct {
	// TaskExecutors and Slots per TaskExecutor. Defaults: 2 and 4; a
	// negative count starts none.
	TaskExecutors, Slots int
	// HeartbeatTimeout of the JobManagers (ResourceManager and JobMasters),
	// whose heartbeat interval is 100ms. Default: 1s. The session TTL is
	// twice the timeout (at least 2s), as the JobManager requires it above
	// one and a half times the timeout.
	HeartbeatTimeout time.Duration
	// Invokables added to every TaskExecutor.
	Invokables map[string]taskexecutor.Invokable
	// AllowExec lets every TaskExecutor run the built-in exec.
	AllowExec bool
	// OutputRetention is how long the JobManagers know where an ended
	// job's attempts ran. Default: 10m.
	OutputRetention time.Duration
	// DetailsRetention and DetailsSubtasks bound the final details of
	// ended jobs the JobManagers keep. Defaults: 10m and 1,000,000.
	DetailsRetention time.Duration
	DetailsSubtasks  int
	// TaskExecutorInterceptors, if set, wrap every TaskExecutor's handler
	// inside the recording of the task log (for injecting faults: a call
	// that is handled but whose answer is lost, say).
	TaskExecutorInterceptors []connect.Interceptor
	// TaskExecutorClientInterceptors, if set, wrap every TaskExecutor's
	// calls to the JobManagers, inside the recording of the task log (for
	// injecting faults: a TaskExecutor cut off from them for a while, say).
	TaskExecutorClientInterceptors []connect.Interceptor
	// WrapStore, if set, wraps the store the first JobManager uses (for
	// recording or injecting faults).
	WrapStore func(hastore.Store) hastore.Store
	// JobManagers on the shared store; the first leads. Default: 1.
	JobManagers int
	// ResultRetention is the JobManagers' result retention. Default: keep.
	ResultRetention time.Duration
	// SlotTimeout bounds a region's wait for slots. Default: 5m.
	SlotTimeout time.Duration
	// SlotYield is how long a waiting region's job keeps idle slots.
	// Default: 5s; negative: for ever.
	SlotYield time.Duration
	// Clock, if set, drives the JobMasters' restart delays.
	Clock jobmaster.Clock
	// MaxJobs and MaxClusterSubtasks are the JobManagers' cluster limits.
	// Default: none.
	MaxJobs, MaxClusterSubtasks int
	// DispatcherOptions are added to every JobManager's public API
	// handler (authentication, per-client limits). Default: none.
	DispatcherOptions []connect.HandlerOption
}

// Cluster is a running cluster; it stops when the test ends.
type Cluster struct {
	Store      *etcdstore.Store
	URL        string // the first JobManager's base URL
	Dispatcher jobplanev1connect.DispatcherServiceClient
	HTTP       *http.Client
	// JobManagers are the cluster's JobManager processes, in start order.
	JobManagers []*JobManager
	// TaskExecutors are the cluster's TaskExecutors, in start order.
	TaskExecutors []*TaskExecutor
	// Tasks records the task calls at every TaskExecutor.
	Tasks *TaskLog
}

// TaskExecutor is one TaskExecutor of a cluster.
type TaskExecutor struct {
	ID       string
	stopServ func()
	cut      *atomic.Bool
}

// Partition cuts the TaskExecutor off the cluster, both ways, as a
// network partition would, while it keeps running: its endpoint closes
// and its calls fail. To the JobManager it falls silent.
func (te *TaskExecutor) Partition() {
	te.cut.Store(true)
	te.stopServ()
}

// cutOff fails a TaskExecutor's calls once cut is set.
func cutOff(cut *atomic.Bool) connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if cut.Load() {
				return nil, connect.NewError(connect.CodeUnavailable, errors.New("partitioned"))
			}
			return next(ctx, req)
		}
	}
}

// JobManager is one JobManager of a cluster.
type JobManager struct {
	URL        string
	Dispatcher jobplanev1connect.DispatcherServiceClient
	stop       []func()
}

// Stop stops the JobManager gracefully, as SIGTERM would: it resigns its
// leadership and closes its endpoint.
func (j *JobManager) Stop() {
	for _, f := range j.stop {
		f()
	}
	j.stop = nil
}

// Logger drops logs unless JOBPLANE_TEST_LOGS is set.
func Logger() *slog.Logger {
	if os.Getenv("JOBPLANE_TEST_LOGS") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// Start starts a cluster with one JobManager on a fresh embedded member.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	switch {
	case opts.TaskExecutors == 0:
		opts.TaskExecutors = 2
	case opts.TaskExecutors < 0:
		opts.TaskExecutors = 0
	}
	if opts.Slots == 0 {
		opts.Slots = 4
	}
	if opts.HeartbeatTimeout == 0 {
		opts.HeartbeatTimeout = time.Second
	}
	log := Logger()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	octx, ocancel := context.WithTimeout(ctx, 30*time.Second)
	defer ocancel()
	store, err := etcdstore.Open(octx, etcdstore.OpenConfig{DataDir: t.TempDir(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	client := transport.NewClient(nil)
	t.Cleanup(client.CloseIdleConnections)

	if opts.JobManagers == 0 {
		opts.JobManagers = 1
	}
	var jms []*JobManager
	for i := range opts.JobManagers {
		var jmStore hastore.Store = store
		if i == 0 && opts.WrapStore != nil {
			jmStore = opts.WrapStore(store)
		}
		jms = append(jms, startJobManager(t, ctx, jmStore, client, opts, log))
		if i == 0 {
			// The first one leads: let it win before the others campaign.
			waitLeader(t, store, jms[0].URL)
		}
	}
	var tes []*TaskExecutor
	tasks := &TaskLog{}
	for range opts.TaskExecutors {
		tep := listen(t, log)
		id := new(string)
		record := connect.WithInterceptors(tasks.interceptor(id))
		cut := new(atomic.Bool)
		te, err := taskexecutor.New(taskexecutor.Config{
			Address: tep.URL(), Slots: opts.Slots, Store: store, HTTPClient: client, Invokables: opts.Invokables, Logger: log,
			AllowExec:     opts.AllowExec,
			CancelGrace:   100 * time.Millisecond,
			ClientOptions: []connect.ClientOption{record, connect.WithInterceptors(append(opts.TaskExecutorClientInterceptors, cutOff(cut))...)},
		})
		if err != nil {
			t.Fatal(err)
		}
		*id = te.ID()
		faults := connect.WithInterceptors(opts.TaskExecutorInterceptors...)
		tep.Mount(clusterv1connect.TaskExecutorServiceName, func(hopts ...connect.HandlerOption) (string, http.Handler) {
			return te.Handler(append(hopts, record, faults)...)
		})
		stopServ := run(t, ctx, tep.Run)
		run(t, ctx, te.Run)
		tes = append(tes, &TaskExecutor{ID: te.ID(), stopServ: stopServ, cut: cut})
	}
	c := &Cluster{Store: store, URL: jms[0].URL, HTTP: client, Dispatcher: jms[0].Dispatcher, JobManagers: jms, TaskExecutors: tes, Tasks: tasks}
	c.WaitReady(t, opts.TaskExecutors)
	return c
}

// WaitReady waits until the JobManager leads and n TaskExecutors have
// registered with it.
func (c *Cluster) WaitReady(t testing.TB, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := c.Dispatcher.GetClusterOverview(ctx, &jobplanev1.GetClusterOverviewRequest{})
		cancel()
		if err == nil && int(resp.GetTaskExecutorCount()) >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster not ready after 30s: %v, %v", resp, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func startJobManager(t testing.TB, ctx context.Context, store hastore.Store, client *http.Client, opts Options, log *slog.Logger) *JobManager {
	t.Helper()
	ep := listen(t, log)
	jm, err := jobmanager.New(jobmanager.Config{
		Store: store, Address: ep.URL(), HTTPClient: client, SessionTTL: max(2*opts.HeartbeatTimeout, 2*time.Second),
		HeartbeatInterval: 100 * time.Millisecond, HeartbeatTimeout: opts.HeartbeatTimeout,
		ResultRetention: opts.ResultRetention, SlotTimeout: opts.SlotTimeout, SlotYield: opts.SlotYield, Clock: opts.Clock, Logger: log,
		OutputRetention:  opts.OutputRetention,
		DetailsRetention: opts.DetailsRetention, DetailsSubtasks: opts.DetailsSubtasks,
		MaxRequestBytes: ep.MaxRequestBytes(), MaxResponseBytes: ep.MaxResponseBytes(),
		MaxJobs: opts.MaxJobs, MaxClusterSubtasks: opts.MaxClusterSubtasks, DispatcherOptions: opts.DispatcherOptions,
	})
	if err != nil {
		t.Fatal(err)
	}
	jm.Mount(ep)
	h := &JobManager{URL: ep.URL(), Dispatcher: jobplanev1connect.NewDispatcherServiceClient(client, ep.URL())}
	h.stop = append(h.stop, run(t, ctx, jm.Run), run(t, ctx, ep.Run))
	t.Cleanup(h.Stop)
	return h
}

// waitLeader waits until the leader of "jobmanager" is at address.
func waitLeader(t testing.TB, store hastore.Store, address string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, err := store.Leader(context.Background(), election.JobManager)
		if err == nil && info.Address == address {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not leading after 30s: %+v, %v", address, info, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func listen(t testing.TB, log *slog.Logger) *endpoint.Endpoint {
	t.Helper()
	ep, err := endpoint.Listen(endpoint.Config{Listen: "127.0.0.1:0", ShutdownTimeout: time.Second}, log)
	if err != nil {
		t.Fatal(err)
	}
	return ep
}

// run runs f until the test ends, or until the returned stop is called,
// and waits for it to return.
func run(t testing.TB, ctx context.Context, f func(context.Context) error) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- f(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("component stopped with %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

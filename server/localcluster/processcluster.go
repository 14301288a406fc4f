package localcluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
	"github.com/jobplane/jobplane/sdk"
	"github.com/jobplane/jobplane/server/localcluster/freeport"
)

// ProcessClusterConfig describes a ProcessCluster. Zero fields take their
// defaults.
type ProcessClusterConfig struct {
	// EtcdMembers is the number of etcd members. Default: 3.
	EtcdMembers int
	// JobManagers is the number of jobmanagers. Default: 2.
	JobManagers int
	// TaskExecutors is the number of TaskExecutors. Default: 2.
	TaskExecutors int
	// Slots is the number of slots of each TaskExecutor. Default: 4.
	Slots int
	// JobManagerArgs are passed to every jobmanager: its timings, say
	// ("--session-ttl", "5s"). Default: none, the binary's defaults, which
	// is what the failover tests and figures are about.
	JobManagerArgs []string
	// TaskExecutorArgs are passed to every TaskExecutor. Default: none.
	TaskExecutorArgs []string
	// EtcdProxies puts a loopback TCP proxy of its own between each
	// jobmanager and each etcd member, so that JobManagerProcess.CutEtcd
	// can partition it from the etcd cluster. Default: direct
	// connections.
	EtcdProxies bool
	// TaskExecutorHAStore lists the indexes of the jobmanagers whose URLs
	// make the TaskExecutors' --hastore (comma-separated). When empty
	// (the default), the TaskExecutors use a `jobplane hastore` process of
	// their own on the etcd cluster, which the cluster never stops, so
	// that any jobmanager may be killed.
	TaskExecutorHAStore []int
	// EmbeddedStore runs no etcd cluster: one `jobplane hastore` process
	// embeds a single etcd member, and the jobmanagers and TaskExecutors
	// reach it over HAStoreService (--hastore), as the one-machine HA
	// setup does. EtcdMembers, EtcdProxies and TaskExecutorHAStore are
	// then ignored, and EtcdClient fails. Default: an etcd cluster.
	EmbeddedStore bool
	// EmbeddedPeers runs no etcd processes either: each jobmanager embeds
	// an etcd member and they form one cluster (--etcd-peers), as the
	// README's three machines do; the TaskExecutors use every jobmanager
	// as --hastore. EtcdMembers, EtcdProxies and TaskExecutorHAStore are
	// then ignored; EtcdClient reaches the embedded members. Killing a
	// jobmanager kills its member. Default: an etcd cluster.
	EmbeddedPeers bool
	// JobManagerCommands runs, as jobmanager i, the command given for i
	// instead of `jobplane jobmanager`: a server of another
	// implementation of the contract (the TypeScript one, say: "node",
	// "jobmanager-ts/dist/main.js"). It is given --listen,
	// --listen-addr-file and --hastore (the words after the first go
	// before them), and none of JobManagerArgs; it reaches the store
	// over HAStoreService, so EmbeddedStore must be set. Default: none.
	JobManagerCommands map[int][]string
}

func (c ProcessClusterConfig) withDefaults() ProcessClusterConfig {
	if c.EtcdMembers == 0 {
		c.EtcdMembers = 3
	}
	if c.JobManagers == 0 {
		c.JobManagers = 2
	}
	if c.TaskExecutors == 0 {
		c.TaskExecutors = 2
	}
	if c.Slots == 0 {
		c.Slots = 4
	}
	return c
}

// ProcessCluster is a jobplane HA cluster of real processes on loopback:
// etcd members (unless the store is embedded), jobmanagers,
// TaskExecutors and the TaskExecutors' HA-store server. Close ends them
// all.
type ProcessCluster struct {
	cfg     ProcessClusterConfig
	dir     string
	ttl     time.Duration
	etcd    []*EtcdMember
	jms     []*JobManagerProcess
	tes     []*TaskExecutorProcess
	hastore *Process
	peers   []string // the client URLs of the jobmanagers' members (EmbeddedPeers)
	tr      *http.Transport
	hc      *http.Client
	proxies []*Proxy
}

// EtcdMember is one member of the etcd cluster, an etcd server process.
type EtcdMember struct {
	*Process
	clientURL, peerURL string
}

// ClientURL returns the member's loopback client URL; it stays the same
// across restarts.
func (m *EtcdMember) ClientURL() string { return m.clientURL }

// PeerURL returns the member's loopback peer URL; it stays the same
// across restarts.
func (m *EtcdMember) PeerURL() string { return m.peerURL }

// JobManagerProcess is one `jobplane jobmanager` process; its URL stays
// the same across restarts.
type JobManagerProcess struct {
	*Process
	dispatcher jobplanev1connect.DispatcherServiceClient
	proxies    []*Proxy // nil without ProcessClusterConfig.EtcdProxies
}

// Dispatcher returns a client of the jobmanager's DispatcherService
// (HTTP/1.1), which neither retries nor follows the leader.
func (jm *JobManagerProcess) Dispatcher() jobplanev1connect.DispatcherServiceClient {
	return jm.dispatcher
}

// TaskExecutorProcess is one `jobplane taskexecutor` process, which
// writes an attempt log.
type TaskExecutorProcess struct {
	*Process
	attemptLog string
}

// AttemptLog returns the path of the TaskExecutor's --attempt-log: a JSON
// line (taskexecutor.AttemptRecord) whenever an attempt starts or stops.
func (te *TaskExecutorProcess) AttemptLog() string { return te.attemptLog }

// logsEnv, when set in the environment, makes NewProcessCluster log the
// processes' logs at the end of every test, not only of a failed one.
const logsEnv = "JOBPLANE_TEST_LOGS"

// NewProcessCluster is StartProcessCluster for a test: it fails the test
// if the cluster does not start within two minutes, closes it when the
// test ends, and then, if the test failed (or the environment sets
// JOBPLANE_TEST_LOGS), logs the end of every process's log.
func NewProcessCluster(t TB, cfg ProcessClusterConfig) *ProcessCluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := StartProcessCluster(ctx, cfg)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(func() {
		c.kill()
		if t.Failed() || os.Getenv(logsEnv) != "" {
			t.Logf("%s", c.Logs())
		}
		c.Close()
	})
	return c
}

// StartProcessCluster builds the binaries (once per process: Binaries),
// starts the etcd members, the TaskExecutors' HA-store server, the
// jobmanagers one after the other (the first leads) and the
// TaskExecutors, and returns once the leader counts every TaskExecutor.
// On failure it ends what it started; the error carries the processes'
// logs.
func StartProcessCluster(ctx context.Context, cfg ProcessClusterConfig) (*ProcessCluster, error) {
	cfg = cfg.withDefaults()
	jobplane, etcd, err := Binaries()
	if err != nil {
		return nil, err
	}
	ttl, err := sessionTTL(cfg.JobManagerArgs)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "localcluster-")
	if err != nil {
		return nil, err
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 8, IdleConnTimeout: 30 * time.Second}
	c := &ProcessCluster{dir: filepath.Clean(dir), cfg: cfg, ttl: ttl, tr: tr, hc: &http.Client{Transport: tr}}
	if err := c.start(ctx, jobplane, etcd); err != nil {
		c.kill()
		err = fmt.Errorf("localcluster: %w\n%s", err, c.Logs())
		c.Close()
		return nil, err
	}
	return c, nil
}

func (c *ProcessCluster) start(ctx context.Context, jobplane, etcd string) error {
	switch {
	case c.cfg.EmbeddedStore:
		c.cfg.EtcdProxies, c.cfg.TaskExecutorHAStore = false, nil
	case c.cfg.EmbeddedPeers:
		c.cfg.EtcdProxies, c.cfg.TaskExecutorHAStore = false, nil
		for i := range c.cfg.JobManagers {
			c.cfg.TaskExecutorHAStore = append(c.cfg.TaskExecutorHAStore, i)
		}
		if err := c.startPeers(ctx, jobplane); err != nil {
			return err
		}
	default:
		if err := c.startEtcd(ctx, etcd); err != nil {
			return err
		}
	}
	var storeURLs []string
	if len(c.cfg.TaskExecutorHAStore) == 0 {
		p, err := c.startHAStore(ctx, jobplane)
		if err != nil {
			return err
		}
		c.hastore, storeURLs = p, []string{p.URL()}
	}
	for i := len(c.jms); i < c.cfg.JobManagers; i++ {
		jm, err := c.startJobManager(ctx, jobplane, i, nil)
		if err != nil {
			return err
		}
		c.jms = append(c.jms, jm)
		if i == 0 {
			if _, err := c.WaitLeader(ctx); err != nil {
				return err
			}
		}
	}
	for _, i := range c.cfg.TaskExecutorHAStore {
		if i < 0 || i >= len(c.jms) {
			return fmt.Errorf("TaskExecutorHAStore: no jobmanager %d", i)
		}
		storeURLs = append(storeURLs, c.jms[i].URL())
	}
	for i := range c.cfg.TaskExecutors {
		te, err := c.startTaskExecutor(ctx, jobplane, i, strings.Join(storeURLs, ","))
		if err != nil {
			return err
		}
		c.tes = append(c.tes, te)
	}
	return c.WaitTaskExecutors(ctx, c.cfg.TaskExecutors)
}

// freePorts returns n distinct loopback ports that were free a moment ago
// (see internal/freeport).
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		p, err := freeport.Port()
		if err != nil {
			return nil, err
		}
		ports = append(ports, p)
	}
	return ports, nil
}

func (c *ProcessCluster) startEtcd(ctx context.Context, etcd string) error {
	n := c.cfg.EtcdMembers
	ports, err := freePorts(2 * n)
	if err != nil {
		return err
	}
	var initial []string
	for i := range n {
		m := &EtcdMember{
			clientURL: fmt.Sprintf("http://127.0.0.1:%d", ports[2*i]),
			peerURL:   fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1]),
		}
		c.etcd = append(c.etcd, m)
		initial = append(initial, fmt.Sprintf("m%d=%s", i, m.peerURL))
	}
	token := make([]byte, 8)
	_, _ = rand.Read(token)
	for i, m := range c.etcd {
		args := []string{
			"--name", fmt.Sprintf("m%d", i), "--data-dir", "data",
			"--listen-client-urls", m.clientURL, "--advertise-client-urls", m.clientURL,
			"--listen-peer-urls", m.peerURL, "--initial-advertise-peer-urls", m.peerURL,
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
			"--initial-cluster-token", "localcluster-" + hex.EncodeToString(token), "--log-level", "warn",
			// The timings the README recommends beside the default session
			// TTL: a new etcd leader within about a second.
			"--heartbeat-interval", "50", "--election-timeout", "500",
		}
		name := fmt.Sprintf("etcd-%d", i)
		p, err := newProcess(Command{Name: name, Dir: filepath.Join(c.dir, name), Path: etcd,
			Args: func() []string { return args }, Ready: func(ctx context.Context, _ *Process) error { return memberReady(ctx, m) }})
		if err != nil {
			return err
		}
		m.Process = p
		// Every member starts before any is waited for: a member's
		// first run waits for its peers.
		if err := p.start(); err != nil {
			return err
		}
	}
	for _, m := range c.etcd {
		if err := m.ready(ctx); err != nil {
			return err
		}
	}
	// A linearizable read answers once the cluster has a leader.
	cli, err := c.EtcdClient()
	if err != nil {
		return err
	}
	defer cli.Close()
	return c.etcd[0].Poll(ctx, 20*time.Millisecond, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := cli.Get(ctx, "localcluster-ready")
		return err
	})
}

// memberReady waits until the member answers a status request, which it
// does on its own, with or without a quorum.
func memberReady(ctx context.Context, m *EtcdMember) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{m.clientURL}, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	return m.Poll(ctx, 20*time.Millisecond, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := cli.Status(ctx, m.clientURL)
		return err
	})
}

// EtcdEndpoints returns the client URLs of the etcd members (of the
// jobmanagers' embedded members with ProcessClusterConfig.EmbeddedPeers).
func (c *ProcessCluster) EtcdEndpoints() []string {
	if c.cfg.EmbeddedPeers {
		return c.peers
	}
	var eps []string
	for _, m := range c.etcd {
		eps = append(eps, m.clientURL)
	}
	return eps
}

// EtcdClient returns a new etcd client of every member; the caller closes
// it. It fails with ProcessClusterConfig.EmbeddedStore.
func (c *ProcessCluster) EtcdClient() (*clientv3.Client, error) {
	if len(c.EtcdEndpoints()) == 0 {
		return nil, ErrNoEtcd
	}
	return clientv3.New(clientv3.Config{Endpoints: c.EtcdEndpoints(), DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
}

// server starts a jobplane server process of the cluster named name.
func (c *ProcessCluster) server(ctx context.Context, jobplane, name, verb string, args []string, ready func(ctx context.Context, p *Process) error) (*Process, error) {
	return StartServer(ctx, ServerCommand{Name: name, Dir: filepath.Join(c.dir, name), Program: jobplane, Verb: verb, Args: args, Ready: ready})
}

func (c *ProcessCluster) startHAStore(ctx context.Context, jobplane string) (*Process, error) {
	args := []string{"--data-dir", "data"}
	if !c.cfg.EmbeddedStore {
		args = append(args, "--etcd-endpoints", strings.Join(c.EtcdEndpoints(), ","))
	}
	return c.server(ctx, jobplane, "hastore", "hastore", args, nil)
}

// startPeers starts the jobmanagers of ProcessClusterConfig.EmbeddedPeers
// together: a member is ready, and its process serves, once a majority of
// the cluster runs.
func (c *ProcessCluster) startPeers(ctx context.Context, jobplane string) error {
	n := c.cfg.JobManagers
	ports, err := freePorts(2 * n)
	if err != nil {
		return err
	}
	var peers []string
	for i := range n {
		peers = append(peers, fmt.Sprintf("jm%d=http://127.0.0.1:%d", i, ports[2*i]))
		c.peers = append(c.peers, fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1]))
	}
	jms := make([]*JobManagerProcess, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			jms[i], errs[i] = c.startJobManager(ctx, jobplane, i, []string{
				"--etcd-name", fmt.Sprintf("jm%d", i), "--etcd-peers", strings.Join(peers, ","),
				"--etcd-client-listen", strings.TrimPrefix(c.peers[i], "http://"),
			})
		})
	}
	wg.Wait()
	for i, jm := range jms {
		if jm != nil {
			c.jms = append(c.jms, jm)
		} else if errs[i] == nil {
			errs[i] = fmt.Errorf("jobmanager-%d did not start", i)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	_, err = c.WaitLeader(ctx)
	return err
}

// startJobManager starts jobmanager i; member, if not nil, are the flags
// of its embedded member (ProcessClusterConfig.EmbeddedPeers).
func (c *ProcessCluster) startJobManager(ctx context.Context, jobplane string, i int, member []string) (*JobManagerProcess, error) {
	jm := &JobManagerProcess{}
	endpoints := c.EtcdEndpoints()
	if c.cfg.EtcdProxies {
		endpoints = nil
		for _, m := range c.etcd {
			px, err := NewProxy(strings.TrimPrefix(m.clientURL, "http://"))
			if err != nil {
				return nil, err
			}
			c.proxies = append(c.proxies, px)
			jm.proxies = append(jm.proxies, px)
			endpoints = append(endpoints, "http://"+px.Addr())
		}
	}
	store := []string{"--etcd-endpoints", strings.Join(endpoints, ",")}
	switch {
	case c.cfg.EmbeddedStore:
		store = []string{"--hastore", c.hastore.URL()}
	case member != nil:
		store = member
	}
	name := fmt.Sprintf("jobmanager-%d", i)
	cmd := ServerCommand{Name: name, Dir: filepath.Join(c.dir, name), Program: jobplane, Verb: "jobmanager",
		Args: append(append(store, "--data-dir", "data"), c.cfg.JobManagerArgs...)}
	if other, ok := c.cfg.JobManagerCommands[i]; ok {
		if !c.cfg.EmbeddedStore || len(other) < 2 {
			return nil, fmt.Errorf("JobManagerCommands[%d] = %q: want a program and its first argument, with EmbeddedStore", i, other)
		}
		cmd.Program, cmd.Verb, cmd.Args = other[0], other[1], append(slices.Clone(other[2:]), store...)
	}
	cmd.Ready = func(ctx context.Context, p *Process) error {
		if jm.dispatcher == nil {
			jm.Process = p
			jm.dispatcher = jobplanev1connect.NewDispatcherServiceClient(c.hc, p.URL())
		}
		return p.Poll(ctx, 20*time.Millisecond, func(ctx context.Context) error {
			_, _, err := jm.Probe(ctx)
			return err
		})
	}
	p, err := StartServer(ctx, cmd)
	if err != nil {
		return nil, err
	}
	jm.Process = p
	return jm, nil
}

func (c *ProcessCluster) startTaskExecutor(ctx context.Context, jobplane string, i int, store string) (*TaskExecutorProcess, error) {
	name := fmt.Sprintf("taskexecutor-%d", i)
	te := &TaskExecutorProcess{attemptLog: filepath.Join(c.dir, name, "attempts.jsonl")}
	args := append([]string{"--hastore", store, "--slots", strconv.Itoa(c.cfg.Slots), "--attempt-log", te.attemptLog}, c.cfg.TaskExecutorArgs...)
	p, err := c.server(ctx, jobplane, name, "taskexecutor", args, nil)
	if err != nil {
		return nil, err
	}
	te.Process = p
	return te, nil
}

// Dir returns the directory that holds every process's directory (data,
// logs, attempt logs); Close removes it.
func (c *ProcessCluster) Dir() string { return c.dir }

// SessionTTL returns the jobmanagers' session TTL: what
// ProcessClusterConfig.JobManagerArgs set, or else the binary's default.
// Tests bound their waits for a failover by it.
func (c *ProcessCluster) SessionTTL() time.Duration { return c.ttl }

// Etcd returns the etcd members, in --initial-cluster order; none with
// ProcessClusterConfig.EmbeddedStore or EmbeddedPeers.
func (c *ProcessCluster) Etcd() []*EtcdMember { return c.etcd }

// JobManagers returns the jobmanagers, in start order: the first led once
// the cluster started (any of them may with
// ProcessClusterConfig.EmbeddedPeers, which starts them together).
func (c *ProcessCluster) JobManagers() []*JobManagerProcess { return c.jms }

// TaskExecutors returns the TaskExecutors, in start order.
func (c *ProcessCluster) TaskExecutors() []*TaskExecutorProcess { return c.tes }

// HAStore returns the TaskExecutors' HA-store server, nil when they use
// jobmanagers (ProcessClusterConfig.TaskExecutorHAStore, EmbeddedPeers).
func (c *ProcessCluster) HAStore() *Process { return c.hastore }

// Processes returns every process of the cluster.
func (c *ProcessCluster) Processes() []*Process {
	var ps []*Process
	for _, m := range c.etcd {
		if m.Process != nil {
			ps = append(ps, m.Process)
		}
	}
	if c.hastore != nil {
		ps = append(ps, c.hastore)
	}
	for _, jm := range c.jms {
		ps = append(ps, jm.Process)
	}
	for _, te := range c.tes {
		ps = append(ps, te.Process)
	}
	return ps
}

// Close kills every process (SIGKILL; a stopped one too) and waits for
// them, closes the proxies and idle connections, and removes Dir.
func (c *ProcessCluster) Close() {
	c.kill()
	os.RemoveAll(c.dir)
}

// kill is Close but for removing Dir.
func (c *ProcessCluster) kill() {
	for _, p := range c.Processes() {
		p.Kill()
	}
	for _, px := range c.proxies {
		px.Close()
	}
	c.tr.CloseIdleConnections()
}

// Logs returns the end of every process's log, for a failed test.
func (c *ProcessCluster) Logs() string {
	var b strings.Builder
	for _, p := range c.Processes() {
		fmt.Fprintf(&b, "----- %s (%s)\n%s\n", p.Name, p.Dir, p.Log())
	}
	return b.String()
}

// URLs returns the base URLs of the jobmanagers.
func (c *ProcessCluster) URLs() []string {
	var urls []string
	for _, jm := range c.jms {
		urls = append(urls, jm.URL())
	}
	return urls
}

// Client returns an SDK client of every jobmanager (HTTP/1.1), which
// follows the leader and retries; the caller closes it.
func (c *ProcessCluster) Client(opts ...sdk.Option) (*sdk.Client, error) {
	return sdk.New(c.URLs(), append([]sdk.Option{sdk.WithHTTP1()}, opts...)...)
}

// WaitTaskExecutors waits until the leader counts n TaskExecutors, or ctx
// ends.
func (c *ProcessCluster) WaitTaskExecutors(ctx context.Context, n int) error {
	return waitFor(ctx, 20*time.Millisecond, func(ctx context.Context) error {
		jm, err := c.Leader(ctx)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(ctx, probeTimeout)
		defer cancel()
		resp, err := jm.dispatcher.GetClusterOverview(ctx, &jobplanev1.GetClusterOverviewRequest{})
		if err != nil {
			return err
		}
		if got := int(resp.GetTaskExecutorCount()); got != n {
			return fmt.Errorf("%d TaskExecutors registered, want %d", got, n)
		}
		return nil
	})
}

// waitFor calls fn every interval until it returns nil or ctx ends, and
// then returns ctx's error with fn's last one.
func waitFor(ctx context.Context, interval time.Duration, fn func(ctx context.Context) error) error {
	for {
		err := fn(ctx)
		if err == nil {
			return nil
		}
		timer := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			timer.Stop()
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-timer.C:
		}
	}
}

// EtcdLeader returns the jobmanager whose embedded member leads etcd, as
// the members report it (ProcessClusterConfig.EmbeddedPeers), or nil if
// none answers as the leader.
func (c *ProcessCluster) EtcdLeader(ctx context.Context) (*JobManagerProcess, error) {
	if !c.cfg.EmbeddedPeers {
		return nil, ErrNoPeers
	}
	cli, err := c.EtcdClient()
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	for i, u := range c.peers {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := cli.Status(sctx, u)
		cancel()
		if err == nil && st.Leader != 0 && st.Leader == st.Header.GetMemberId() {
			return c.jms[i], nil
		}
	}
	return nil, nil
}

package hacluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
	"github.com/jobplane/jobplane/internal/freeport"
	"github.com/jobplane/jobplane/sdk"
)

// Config describes a Cluster. Zero fields take their defaults.
type Config struct {
	// EtcdMembers is the number of etcd members. Default: 3.
	EtcdMembers int
	// JobManagers is the number of jobmanagers. Default: 2.
	JobManagers int
	// TaskExecutors is the number of TaskExecutors. Default: 2.
	TaskExecutors int
	// Slots is the number of slots of each TaskExecutor. Default: 4.
	Slots int
	// JobManagerArgs are passed to every jobmanager after TimingFlags.
	JobManagerArgs []string
	// TaskExecutorArgs are passed to every TaskExecutor.
	TaskExecutorArgs []string
	// EtcdProxies puts a loopback TCP proxy of its own between each
	// jobmanager and each etcd member, so that JobManager.CutEtcd can
	// partition it from the etcd cluster. Default: direct connections.
	EtcdProxies bool
	// TaskExecutorHAStore lists the indexes of the jobmanagers whose URLs
	// make the TaskExecutors' --hastore (comma-separated). When empty
	// (the default), the TaskExecutors use a `jobplane hastore` process of
	// their own on the etcd cluster, which the harness never stops, so
	// that any jobmanager may be killed.
	TaskExecutorHAStore []int
	// EmbeddedStore runs no etcd cluster: one `jobplane hastore` process
	// embeds a single etcd member, and the jobmanagers and TaskExecutors
	// reach it over HAStoreService (--hastore), as today's one-machine HA
	// setup does. EtcdMembers, EtcdProxies and TaskExecutorHAStore are
	// then ignored, and the Cluster's etcd helpers (EtcdClient,
	// WatchStore, Candidacies) fail. Default: an etcd cluster.
	EmbeddedStore bool
	// EmbeddedPeers runs no etcd processes either: each jobmanager embeds
	// an etcd member and they form one cluster (--etcd-peers), as the
	// README's three machines do; the TaskExecutors use every jobmanager
	// as --hastore. EtcdMembers, EtcdProxies and TaskExecutorHAStore are
	// then ignored; the etcd helpers reach the embedded members. Killing
	// a jobmanager kills its member. Default: an etcd cluster.
	EmbeddedPeers bool
}

func (c Config) withDefaults() Config {
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

// Cluster is a running set of processes; see the package documentation.
// Close ends them all.
type Cluster struct {
	// Etcd are the etcd members, in --initial-cluster order.
	Etcd []*EtcdMember
	// JobManagers are the jobmanagers, in start order: the first led once
	// Start returned (any of them may with Config.EmbeddedPeers, which
	// starts them together).
	JobManagers []*JobManager
	// TaskExecutors are the TaskExecutors.
	TaskExecutors []*TaskExecutor
	// HAStore is the TaskExecutors' HA-store server, nil when they use
	// jobmanagers (Config.TaskExecutorHAStore).
	HAStore *Process
	// Dir holds every process's directory (data, logs, attempt logs);
	// Close removes it.
	Dir string
	// PeerClientURLs are the client URLs of the jobmanagers' embedded
	// members, by jobmanager (Config.EmbeddedPeers).
	PeerClientURLs []string

	cfg     Config
	tr      *http.Transport
	hc      *http.Client
	proxies []*Proxy
}

// EtcdMember is one member of the etcd cluster.
type EtcdMember struct {
	*Process
	// ClientURL and PeerURL are the member's loopback URLs; they stay the
	// same across restarts.
	ClientURL, PeerURL string
}

// JobManager is one `jobplane jobmanager` process.
type JobManager struct {
	*Process
	// URL is its base URL; it stays the same across restarts.
	URL string
	// Dispatcher calls its DispatcherService (HTTP/1.1, no retries).
	Dispatcher jobplanev1connect.DispatcherServiceClient

	proxies []*Proxy // nil without Config.EtcdProxies
}

// TaskExecutor is one `jobplane taskexecutor` process.
type TaskExecutor struct {
	*Process
	// AttemptLog is the path of its --attempt-log.
	AttemptLog string
}

// New starts a Cluster for one test: it fails the test if the cluster
// does not start within two minutes, closes it when the test ends, and
// then, if the test failed (or the environment sets HACLUSTER_LOGS), logs
// the end of every process's log.
func New(t testing.TB, cfg Config) *Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.kill()
		if t.Failed() || os.Getenv("HACLUSTER_LOGS") != "" {
			t.Log(c.Logs())
		}
		c.Close()
	})
	return c
}

// Start builds the binaries (once), starts the etcd members, the
// TaskExecutors' HA-store server, the jobmanagers one after the other (the
// first leads) and the TaskExecutors, and returns once the leader counts
// every TaskExecutor. On failure it ends what it started; the error
// carries the processes' logs.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	cfg = cfg.withDefaults()
	jobplane, etcd, err := Binaries()
	if err != nil {
		return nil, err
	}
	dir, err := tempDir()
	if err != nil {
		return nil, err
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 8, IdleConnTimeout: 30 * time.Second}
	c := &Cluster{Dir: dir, cfg: cfg, tr: tr, hc: &http.Client{Transport: tr}}
	if err := c.start(ctx, jobplane, etcd); err != nil {
		c.kill()
		err = fmt.Errorf("hacluster: %w\n%s", err, c.Logs())
		c.Close()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) start(ctx context.Context, jobplane, etcd string) error {
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
		p, url, err := c.startHAStore(ctx, jobplane)
		if err != nil {
			return err
		}
		p.url = url
		c.HAStore, storeURLs = p, []string{url}
	}
	for i := len(c.JobManagers); i < c.cfg.JobManagers; i++ {
		jm, err := c.startJobManager(ctx, jobplane, i, nil)
		if err != nil {
			return err
		}
		c.JobManagers = append(c.JobManagers, jm)
		if i == 0 {
			if _, err := c.WaitLeader(ctx); err != nil {
				return err
			}
		}
	}
	for _, i := range c.cfg.TaskExecutorHAStore {
		if i < 0 || i >= len(c.JobManagers) {
			return fmt.Errorf("TaskExecutorHAStore: no jobmanager %d", i)
		}
		storeURLs = append(storeURLs, c.JobManagers[i].URL)
	}
	for i := range c.cfg.TaskExecutors {
		te, err := c.startTaskExecutor(ctx, jobplane, i, strings.Join(storeURLs, ","))
		if err != nil {
			return err
		}
		c.TaskExecutors = append(c.TaskExecutors, te)
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

func (c *Cluster) startEtcd(ctx context.Context, etcd string) error {
	n := c.cfg.EtcdMembers
	ports, err := freePorts(2 * n)
	if err != nil {
		return err
	}
	var initial []string
	for i := range n {
		m := &EtcdMember{
			ClientURL: fmt.Sprintf("http://127.0.0.1:%d", ports[2*i]),
			PeerURL:   fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1]),
		}
		c.Etcd = append(c.Etcd, m)
		initial = append(initial, fmt.Sprintf("m%d=%s", i, m.PeerURL))
	}
	token := make([]byte, 8)
	_, _ = rand.Read(token)
	for i, m := range c.Etcd {
		args := []string{
			"--name", fmt.Sprintf("m%d", i), "--data-dir", "data",
			"--listen-client-urls", m.ClientURL, "--advertise-client-urls", m.ClientURL,
			"--listen-peer-urls", m.PeerURL, "--initial-advertise-peer-urls", m.PeerURL,
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
			"--initial-cluster-token", "hacluster-" + hex.EncodeToString(token), "--log-level", "warn",
			// The timings the README recommends beside the default session
			// TTL: a new etcd leader within about a second.
			"--heartbeat-interval", "50", "--election-timeout", "500",
		}
		p, err := newProcess(fmt.Sprintf("etcd-%d", i), filepath.Join(c.Dir, fmt.Sprintf("etcd-%d", i)), etcd,
			func() []string { return args }, nil)
		if err != nil {
			return err
		}
		m.Process = p
		p.ready = func(ctx context.Context) error { return c.memberReady(ctx, m) }
		if err := p.start(); err != nil {
			return err
		}
	}
	for _, m := range c.Etcd {
		if err := m.ready(ctx); err != nil {
			return fmt.Errorf("%s: %w", m.Name, err)
		}
	}
	// A linearizable read answers once the cluster has a leader.
	cli, err := c.EtcdClient()
	if err != nil {
		return err
	}
	defer cli.Close()
	return c.Etcd[0].poll(ctx, 20*time.Millisecond, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := cli.Get(ctx, "hacluster-ready")
		return err
	})
}

// memberReady waits until the member answers a status request, which it
// does on its own, with or without a quorum.
func (c *Cluster) memberReady(ctx context.Context, m *EtcdMember) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{m.ClientURL}, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	return m.poll(ctx, 20*time.Millisecond, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := cli.Status(ctx, m.ClientURL)
		return err
	})
}

// EtcdEndpoints returns the client URLs of the etcd members (of the
// jobmanagers' embedded members with Config.EmbeddedPeers).
func (c *Cluster) EtcdEndpoints() []string {
	if c.cfg.EmbeddedPeers {
		return c.PeerClientURLs
	}
	var eps []string
	for _, m := range c.Etcd {
		eps = append(eps, m.ClientURL)
	}
	return eps
}

// EtcdClient returns a new etcd client of every member; the caller closes
// it. It fails with Config.EmbeddedStore.
func (c *Cluster) EtcdClient() (*clientv3.Client, error) {
	if len(c.EtcdEndpoints()) == 0 {
		return nil, errors.New("hacluster: no etcd cluster (Config.EmbeddedStore)")
	}
	return clientv3.New(clientv3.Config{Endpoints: c.EtcdEndpoints(), DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
}

// serverArgs are the arguments of a jobplane server process listening on
// listen (127.0.0.1:0 the first time) that writes its address to addr.
func serverArgs(verb, listen, addrFile string, rest ...string) []string {
	return append([]string{verb, "--listen", listen, "--listen-addr-file", addrFile}, rest...)
}

// readAddr waits until addrFile holds an address.
func readAddr(ctx context.Context, p *Process, addrFile string) (string, error) {
	var addr string
	err := p.poll(ctx, 10*time.Millisecond, func(context.Context) error {
		b, err := os.ReadFile(addrFile)
		if err != nil || len(strings.TrimSpace(string(b))) == 0 {
			return errors.New("no address written yet")
		}
		addr = strings.TrimSpace(string(b))
		return nil
	})
	return addr, err
}

// server starts a jobplane server process whose address stays the same
// across restarts, and returns it with its base URL once it has written its
// address; serving is ready's business (called on every run).
func (c *Cluster) server(ctx context.Context, jobplane, name, verb string, rest []string, ready func(ctx context.Context, p *Process, url string) error) (*Process, string, error) {
	dir := filepath.Join(c.Dir, name)
	addrFile := filepath.Join(dir, "addr")
	var mu sync.Mutex
	listen := "127.0.0.1:0"
	args := func() []string {
		mu.Lock()
		defer mu.Unlock()
		// The new run writes its address anew; readAddr waits for it.
		os.Remove(addrFile)
		return serverArgs(verb, listen, addrFile, rest...)
	}
	p, err := newProcess(name, dir, jobplane, args, nil)
	if err != nil {
		return nil, "", err
	}
	p.ready = func(ctx context.Context) error {
		addr, err := readAddr(ctx, p, addrFile)
		if err != nil {
			return err
		}
		mu.Lock()
		listen = addr
		mu.Unlock()
		return ready(ctx, p, "http://"+addr)
	}
	if err := p.start(); err != nil {
		return nil, "", err
	}
	if err := p.ready(ctx); err != nil {
		return nil, "", fmt.Errorf("%s: %w", name, err)
	}
	mu.Lock()
	defer mu.Unlock()
	return p, "http://" + listen, nil
}

func (c *Cluster) startHAStore(ctx context.Context, jobplane string) (*Process, string, error) {
	args := []string{"--data-dir", "data"}
	if !c.cfg.EmbeddedStore {
		args = append(args, "--etcd-endpoints", strings.Join(c.EtcdEndpoints(), ","))
	}
	return c.server(ctx, jobplane, "hastore", "hastore", args, func(context.Context, *Process, string) error { return nil })
}

// startPeers starts the jobmanagers of Config.EmbeddedPeers together: a
// member is ready, and its process serves, once a majority of the
// cluster runs.
func (c *Cluster) startPeers(ctx context.Context, jobplane string) error {
	n := c.cfg.JobManagers
	ports, err := freePorts(2 * n)
	if err != nil {
		return err
	}
	var peers []string
	for i := range n {
		peers = append(peers, fmt.Sprintf("jm%d=http://127.0.0.1:%d", i, ports[2*i]))
		c.PeerClientURLs = append(c.PeerClientURLs, fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1]))
	}
	jms := make([]*JobManager, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			jms[i], errs[i] = c.startJobManager(ctx, jobplane, i, []string{
				"--etcd-name", fmt.Sprintf("jm%d", i), "--etcd-peers", strings.Join(peers, ","),
				"--etcd-client-listen", strings.TrimPrefix(c.PeerClientURLs[i], "http://"),
			})
		})
	}
	wg.Wait()
	for i, jm := range jms {
		if jm != nil {
			c.JobManagers = append(c.JobManagers, jm)
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
// of its embedded member (Config.EmbeddedPeers).
func (c *Cluster) startJobManager(ctx context.Context, jobplane string, i int, member []string) (*JobManager, error) {
	jm := &JobManager{}
	endpoints := c.EtcdEndpoints()
	if c.cfg.EtcdProxies {
		endpoints = nil
		for _, m := range c.Etcd {
			px, err := NewProxy(strings.TrimPrefix(m.ClientURL, "http://"))
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
		store = []string{"--hastore", c.HAStore.url}
	case member != nil:
		store = member
	}
	rest := append(append(store, "--data-dir", "data"), TimingFlags...)
	rest = append(rest, c.cfg.JobManagerArgs...)
	p, url, err := c.server(ctx, jobplane, fmt.Sprintf("jobmanager-%d", i), "jobmanager", rest, func(ctx context.Context, p *Process, url string) error {
		if jm.Dispatcher == nil {
			jm.Process, jm.URL = p, url
			jm.Dispatcher = jobplanev1connect.NewDispatcherServiceClient(c.hc, url)
		}
		return p.poll(ctx, 20*time.Millisecond, func(ctx context.Context) error {
			_, _, err := jm.Probe(ctx)
			return err
		})
	})
	if err != nil {
		return nil, err
	}
	jm.Process, jm.URL = p, url
	return jm, nil
}

func (c *Cluster) startTaskExecutor(ctx context.Context, jobplane string, i int, store string) (*TaskExecutor, error) {
	name := fmt.Sprintf("taskexecutor-%d", i)
	te := &TaskExecutor{AttemptLog: filepath.Join(c.Dir, name, "attempts.jsonl")}
	rest := append([]string{"--hastore", store, "--slots", strconv.Itoa(c.cfg.Slots), "--attempt-log", te.AttemptLog}, c.cfg.TaskExecutorArgs...)
	p, _, err := c.server(ctx, jobplane, name, "taskexecutor", rest, func(context.Context, *Process, string) error { return nil })
	if err != nil {
		return nil, err
	}
	te.Process = p
	return te, nil
}

// Processes returns every process of the cluster.
func (c *Cluster) Processes() []*Process {
	var ps []*Process
	for _, m := range c.Etcd {
		if m.Process != nil {
			ps = append(ps, m.Process)
		}
	}
	if c.HAStore != nil {
		ps = append(ps, c.HAStore)
	}
	for _, jm := range c.JobManagers {
		ps = append(ps, jm.Process)
	}
	for _, te := range c.TaskExecutors {
		ps = append(ps, te.Process)
	}
	return ps
}

// Close kills every process (SIGKILL; a stopped one too) and waits for
// them, closes the proxies and idle connections, and removes Dir.
func (c *Cluster) Close() {
	c.kill()
	os.RemoveAll(c.Dir)
}

// kill is Close but for removing Dir.
func (c *Cluster) kill() {
	for _, p := range c.Processes() {
		p.Kill()
	}
	for _, px := range c.proxies {
		px.Close()
	}
	c.tr.CloseIdleConnections()
}

// Logs returns the end of every process's log, for a failed test.
func (c *Cluster) Logs() string {
	var b strings.Builder
	for _, p := range c.Processes() {
		fmt.Fprintf(&b, "----- %s (%s)\n%s\n", p.Name, p.Dir, p.Log())
	}
	return b.String()
}

// URLs returns the base URLs of the jobmanagers.
func (c *Cluster) URLs() []string {
	var urls []string
	for _, jm := range c.JobManagers {
		urls = append(urls, jm.URL)
	}
	return urls
}

// Client returns an SDK client of every jobmanager, which follows the
// leader and retries; the caller closes it.
func (c *Cluster) Client(opts ...sdk.Option) (*sdk.Client, error) {
	return sdk.New(c.URLs(), append([]sdk.Option{sdk.WithHTTP1()}, opts...)...)
}

// WaitTaskExecutors waits until the leader counts n TaskExecutors.
func (c *Cluster) WaitTaskExecutors(ctx context.Context, n int) error {
	return waitFor(ctx, 20*time.Millisecond, func(ctx context.Context) error {
		jm, err := c.Leader(ctx)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(ctx, probeTimeout)
		defer cancel()
		resp, err := jm.Dispatcher.GetClusterOverview(ctx, &jobplanev1.GetClusterOverviewRequest{})
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
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(interval):
		}
	}
}

// EtcdLeader returns the jobmanager whose embedded member leads etcd, as
// the members report it (Config.EmbeddedPeers), or nil if none answers as
// the leader.
func (c *Cluster) EtcdLeader(ctx context.Context) (*JobManager, error) {
	if !c.cfg.EmbeddedPeers {
		return nil, errors.New("hacluster: the jobmanagers embed no members (Config.EmbeddedPeers)")
	}
	cli, err := c.EtcdClient()
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	for i, u := range c.PeerClientURLs {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := cli.Status(sctx, u)
		cancel()
		if err == nil && st.Leader != 0 && st.Leader == st.Header.GetMemberId() {
			return c.JobManagers[i], nil
		}
	}
	return nil, nil
}

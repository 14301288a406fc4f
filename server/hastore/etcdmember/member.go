package etcdmember

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	etcdserverpb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/etcdserver"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"
)

// soloCatchUpEntries is the raft entries a member alone keeps in memory
// past its latest snapshot (etcd's SnapshotCatchUpEntries): a member
// that is joined later gets a snapshot instead.
const soloCatchUpEntries = 100

// Config configures an embedded etcd member: a single member on its
// own (the default), or one member of a cluster of embedded members
// (Peers or Join set).
type Config struct {
	// Dir is the member's data directory; created if absent. Required.
	// A directory that already holds a member restarts that member with
	// its data: Peers then only gives the member's own peer URL, and Join
	// is ignored.
	Dir string
	// Name is the member's name, unique in its cluster. Default:
	// "jobplane".
	Name string
	// ClientAddr is the host:port of the member's client listener (for
	// etcdctl, backups, and members that join through it). Port 0 picks a
	// free port; Member.Endpoint reports it. Default: "127.0.0.1:0".
	ClientAddr string
	// PeerAddr is the host:port the member's peer listener binds. Default:
	// the host:port of the member's own entry in Peers; "127.0.0.1:0" for
	// a single member, which only needs the listener to exist.
	PeerAddr string
	// Peers is the initial cluster: every member's name and peer URL,
	// this member's (by Name) included, which is the URL it advertises to
	// its peers. Empty: a single member on its own. A new cluster forms
	// once a majority of Peers has started.
	Peers []Peer
	// Join are client URLs of running members of an existing cluster: a
	// member new to the cluster (an empty Dir) adds itself there, with
	// its own entry in Peers as its peer URL, and starts as a member of
	// that cluster. Requires this member's entry in Peers.
	Join []string
	// PeerTLS, when set, makes the member's traffic with its peers mutual
	// TLS; the Peers' URLs are then https://. Default: plain HTTP, and
	// http:// peer URLs.
	PeerTLS PeerTLS
	// ClusterToken tells apart clusters that form from the same Peers; a
	// single member uses etcd's default. Default: "jobplane".
	ClusterToken string
	// HeartbeatInterval is how often a leader tells its followers it
	// lives. Default: 10ms for a single member, 50ms in a cluster.
	HeartbeatInterval time.Duration
	// ElectionTimeout is how long a follower waits for its leader before
	// it calls an election; at least 5 heartbeat intervals. Default: 100ms
	// for a single member, 500ms in a cluster (half etcd's default), so
	// that a new etcd leader is elected well within the JobManagers'
	// default session TTL of 2s: a longer election stops sessions'
	// renewals long enough to stop running tasks.
	ElectionTimeout time.Duration
	// QuotaBytes is the backend's space quota: past it, etcd refuses writes
	// until space is reclaimed. Default: 2 GiB.
	QuotaBytes int64
	// CompactionRetention is how much history auto-compaction keeps, as a
	// duration (periodic mode). Default: 5m.
	CompactionRetention time.Duration
	// MaxRequestBytes is the largest request the member accepts; it bounds
	// the plan size limit. Default: 2 MiB.
	MaxRequestBytes uint
	// MaxTxnOps is the most operations the member accepts on one level of
	// a transaction; it bounds how many writes the store sends in one
	// transaction. Default: embed.DefaultMaxTxnOps, etcd's default (128).
	MaxTxnOps uint
	// MaintenanceInterval is how often the member checks its space, and
	// compacts and defragments when history or free pages take too much of
	// the quota. Default: 30s.
	MaintenanceInterval time.Duration
	// StartTimeout bounds the wait for the member to become ready: in a
	// cluster, until a majority of members runs. Default: 30s for a single
	// member, 5m in a cluster.
	StartTimeout time.Duration
	// Logger receives etcd's logs (Info as Debug). Default: slog.Default().
	Logger *slog.Logger
}

// PeerTLS is an embedded member's mutual TLS with its peers: its peer
// listener serves CertFile and KeyFile and takes only peers that present
// a certificate CAFile's authorities signed, and the member presents the
// same certificate in its own connections to its peers (so it needs both
// the serverAuth and clientAuth usages, and the names of its peer URL).
// etcd reads the certificate and key again at each handshake, so
// replacing them in place rotates them; the CA file is read at start.
type PeerTLS struct {
	CertFile, KeyFile, CAFile string
}

// enabled reports whether the files are set.
func (t PeerTLS) enabled() bool { return t.CertFile != "" }

// clustered reports whether the member is one of a cluster of embedded
// members rather than a single member on its own.
func (c Config) clustered() bool { return len(c.Peers) > 0 || len(c.Join) > 0 }

// self returns the member's own entry in Peers.
func (c Config) self() (Peer, bool) {
	name := c.WithDefaults().Name
	for _, p := range c.Peers {
		if p.Name == name {
			return p, true
		}
	}
	return Peer{}, false
}

// Validate reports whether the configuration can be used.
func (c Config) Validate() error {
	if c.Dir == "" {
		return errors.New("hastore: member data directory is required")
	}
	for _, addr := range []string{c.ClientAddr, c.PeerAddr} {
		if addr == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return fmt.Errorf("hastore: member address %q: %w", addr, err)
		}
	}
	if c.QuotaBytes < 0 || c.CompactionRetention < 0 || c.MaintenanceInterval < 0 || c.StartTimeout < 0 ||
		c.HeartbeatInterval < 0 || c.ElectionTimeout < 0 {
		return errors.New("hastore: member sizes and durations must not be negative")
	}
	if d := c.WithDefaults(); d.ElectionTimeout < 5*d.HeartbeatInterval {
		return fmt.Errorf("hastore: member election timeout %v must be at least 5 heartbeat intervals (%v)", d.ElectionTimeout, d.HeartbeatInterval)
	}
	if err := validatePeers(c.Peers); err != nil {
		return err
	}
	if t := c.PeerTLS; t.enabled() != (t.KeyFile != "") || t.enabled() != (t.CAFile != "") {
		return errors.New("hastore: peer TLS needs a certificate, its key and the peers' CA, all three")
	}
	for _, p := range c.Peers {
		if https := strings.HasPrefix(p.URL, "https://"); https != c.PeerTLS.enabled() {
			if https {
				return fmt.Errorf("hastore: peer %s: an https:// peer URL needs peer TLS (a certificate, its key and the peers' CA)", p.Name)
			}
			return fmt.Errorf("hastore: peer %s: with peer TLS, peer URLs are https://, not %q", p.Name, p.URL)
		}
	}
	if _, ok := c.self(); !ok && c.clustered() {
		return fmt.Errorf("hastore: the peers have no entry for this member's name %q", c.WithDefaults().Name)
	}
	return validateClientURLs(c.Join)
}

// WithDefaults returns c with every unset field at its documented
// default, as Start runs the member.
func (c Config) WithDefaults() Config {
	if c.Name == "" {
		c.Name = "jobplane"
	}
	if c.ClientAddr == "" {
		c.ClientAddr = "127.0.0.1:0"
	}
	if c.ClusterToken == "" {
		c.ClusterToken = "jobplane"
	}
	if c.clustered() {
		if c.HeartbeatInterval == 0 {
			c.HeartbeatInterval = 50 * time.Millisecond
		}
		if c.ElectionTimeout == 0 {
			c.ElectionTimeout = 500 * time.Millisecond
		}
		if c.StartTimeout == 0 {
			c.StartTimeout = 5 * time.Minute
		}
		for _, p := range c.Peers {
			if u, err := url.Parse(p.URL); err == nil && p.Name == c.Name && c.PeerAddr == "" {
				c.PeerAddr = u.Host
			}
		}
	} else {
		// A single member needs no real elections: short ticks make it
		// ready in tens of milliseconds.
		if c.HeartbeatInterval == 0 {
			c.HeartbeatInterval = 10 * time.Millisecond
		}
		if c.ElectionTimeout == 0 {
			c.ElectionTimeout = 100 * time.Millisecond
		}
		if c.PeerAddr == "" {
			c.PeerAddr = "127.0.0.1:0"
		}
	}
	if c.QuotaBytes == 0 {
		c.QuotaBytes = 2 << 30
	}
	if c.CompactionRetention == 0 {
		c.CompactionRetention = 5 * time.Minute
	}
	if c.MaxRequestBytes == 0 {
		c.MaxRequestBytes = 2 << 20
	}
	if c.MaxTxnOps == 0 {
		c.MaxTxnOps = embed.DefaultMaxTxnOps
	}
	if c.MaintenanceInterval == 0 {
		c.MaintenanceInterval = 30 * time.Second
	}
	if c.StartTimeout == 0 {
		c.StartTimeout = 30 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Member is an embedded etcd member, alone or one of a cluster. While it
// runs, a maintenance goroutine keeps its space in check; Close
// stops both.
type Member struct {
	cfg  Config
	etcd *embed.Etcd
	lock *dirLock // held from before etcd starts until it stopped

	client  *clientv3.Client // the maintenance client
	stop    context.CancelFunc
	wg      sync.WaitGroup
	closing *atomic.Bool // set once Close begins
}

// Start starts an embedded member on cfg.Dir and waits until it
// serves. A member restarted on the same directory has all the data it
// acknowledged before.
//
// With cfg.Peers, the member is one of a cluster of embedded members: on
// an empty directory it bootstraps a new cluster with Peers (and is ready
// once a majority of them runs), or, with cfg.Join, adds itself to the
// running cluster there (etcd's MemberAdd) and starts as its new member.
// A dead member's replacement joins the same way, on an empty directory,
// once the dead member was removed (MemberRemove, e.g. with `jobplane
// etcd-member remove`).
//
// The member holds an exclusive lock on cfg.Dir (the file LockFileName in
// it) until Close. If another member, in this process or another, holds
// the directory, Start fails at once with a *DataDirInUseError
// (ErrDataDirInUse) instead of waiting for it.
func Start(ctx context.Context, cfg Config) (m *Member, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	lock, err := lockDataDir(cfg.Dir)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			lock.unlock()
		}
	}()
	ec := embed.NewConfig()
	ec.Name = cfg.Name
	ec.Dir = cfg.Dir
	ec.TickMs = uint(cfg.HeartbeatInterval.Milliseconds())
	ec.ElectionMs = uint(cfg.ElectionTimeout.Milliseconds())
	clientURL := url.URL{Scheme: "http", Host: cfg.ClientAddr}
	ec.ListenClientUrls = []url.URL{clientURL}
	ec.AdvertiseClientUrls = []url.URL{clientURL}
	peerScheme := "http"
	if t := cfg.PeerTLS; t.enabled() {
		peerScheme = "https"
		ec.PeerTLSInfo = transport.TLSInfo{CertFile: t.CertFile, KeyFile: t.KeyFile, TrustedCAFile: t.CAFile, ClientCertAuth: true}
	}
	ec.ListenPeerUrls = []url.URL{{Scheme: peerScheme, Host: cfg.PeerAddr}}
	ec.AdvertisePeerUrls = ec.ListenPeerUrls
	ec.InitialCluster = ec.InitialClusterFromName(cfg.Name)
	if self, ok := cfg.self(); ok {
		ec.InitialClusterToken = cfg.ClusterToken
		if _, port, _ := net.SplitHostPort(cfg.ClientAddr); port == "0" {
			cfg.Logger.Warn("etcd member's client listener has no fixed port: the cluster lists it with port 0, and members cannot join through it", "name", cfg.Name, "client_addr", cfg.ClientAddr)
		}
		u, err := url.Parse(self.URL)
		if err != nil {
			return nil, fmt.Errorf("hastore: peer URL %q: %w", self.URL, err)
		}
		ec.AdvertisePeerUrls = []url.URL{*u}
		restart := hasMemberData(cfg.Dir)
		switch {
		case restart:
			// etcd restarts a member from its write-ahead log and ignores
			// the initial cluster.
			ec.InitialCluster = initialCluster([]Peer{self})
			cfg.Logger.Info("restarting etcd member from its data", "name", cfg.Name, "dir", cfg.Dir)
		case len(cfg.Join) > 0:
			if ec.InitialCluster, err = joinCluster(ctx, cfg, cfg.Name, self.URL); err != nil {
				return nil, err
			}
			ec.ClusterState = embed.ClusterStateFlagExisting
		default:
			ec.InitialCluster = initialCluster(cfg.Peers)
		}
	}
	if len(cfg.Peers) <= 1 && len(cfg.Join) == 0 {
		// A member alone has no follower to catch up: its in-memory raft
		// log needs to keep no entries past a snapshot (etcd keeps 5,000,
		// about 0.6 KB of heap per entry of a plan write).
		ec.SnapshotCatchUpEntries = soloCatchUpEntries
	}
	ec.QuotaBackendBytes = cfg.QuotaBytes
	ec.MaxRequestBytes = cfg.MaxRequestBytes
	ec.MaxTxnOps = cfg.MaxTxnOps
	ec.AutoCompactionMode = "periodic"
	ec.AutoCompactionRetention = cfg.CompactionRetention.String()
	ec.BootstrapDefragThresholdMegabytes = 16
	ec.Logger = "zap"
	closing := new(atomic.Bool)
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zapToSlogClosing(cfg.Logger, closing))

	e, err := embed.StartEtcd(ec)
	if err != nil {
		return nil, fmt.Errorf("hastore: start etcd member in %s: %w", cfg.Dir, err)
	}
	timer := time.NewTimer(cfg.StartTimeout)
	defer timer.Stop()
	// A member of a cluster is ready once a majority runs; say what it
	// waits for, now and then, so that an operator starting machines one
	// by one sees why.
	waiting := time.NewTicker(5 * time.Second)
	defer waiting.Stop()
	for ready := false; !ready; {
		select {
		case <-e.Server.ReadyNotify():
			ready = true
		case <-waiting.C:
			if cfg.clustered() {
				cfg.Logger.Info("etcd member waiting for a majority of its cluster", "name", cfg.Name, "cluster", ec.InitialCluster)
			}
		case err := <-e.Err():
			e.Close()
			return nil, fmt.Errorf("hastore: etcd member: %w", err)
		case <-timer.C:
			e.Close()
			if cfg.clustered() {
				return nil, fmt.Errorf("hastore: etcd member %s not ready after %v: no majority of its cluster (%s) runs", cfg.Name, cfg.StartTimeout, ec.InitialCluster)
			}
			return nil, fmt.Errorf("hastore: etcd member not ready after %v", cfg.StartTimeout)
		case <-ctx.Done():
			e.Close()
			return nil, ctx.Err()
		}
	}
	m = &Member{cfg: cfg, etcd: e, lock: lock, closing: closing}
	m.client, err = m.NewClient()
	if err != nil {
		e.Close()
		return nil, err
	}
	mctx, cancel := context.WithCancel(context.Background())
	m.stop = cancel
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		m.maintain(mctx)
	}()
	return m, nil
}

// Endpoint returns the member's client URL, such as
// "http://127.0.0.1:40123".
func (m *Member) Endpoint() string {
	return "http://" + m.etcd.Clients[0].Addr().String()
}

// NewClient returns a new client of the member; the caller closes it.
func (m *Member) NewClient() (*clientv3.Client, error) {
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{m.Endpoint()},
		DialTimeout: 5 * time.Second,
		Logger:      zapToSlog(m.cfg.Logger),
	})
	if err != nil {
		return nil, fmt.Errorf("hastore: etcd client: %w", err)
	}
	return c, nil
}

// ID returns the member's ID in its cluster.
func (m *Member) ID() uint64 { return uint64(m.etcd.Server.MemberID()) }

// Config returns the member's configuration, with the defaults filled in.
func (m *Member) Config() Config { return m.cfg }

// Server returns the member's etcd server, for what acts on etcd's own
// raft state beside the store: moving etcd's leadership off a member
// (package etcdstore's leader placement) needs the member's view of its
// cluster and its MoveLeader.
func (m *Member) Server() *etcdserver.EtcdServer { return m.etcd.Server }

// Clustered reports whether the member was configured as one of a
// cluster of embedded members (Config.Peers or Join).
func (m *Member) Clustered() bool { return m.cfg.clustered() }

// LocalClient returns a client of the member that calls its server in
// this process, without gRPC or a socket between them; the caller closes
// it before the member.
func (m *Member) LocalClient() *clientv3.Client { return v3client.New(m.etcd.Server) }

// Err reports a fatal error of the running member.
func (m *Member) Err() <-chan error { return m.etcd.Err() }

// Close stops maintenance and the member, waiting for both, and then
// releases the data directory.
func (m *Member) Close() error {
	m.closing.Store(true)
	m.stop()
	m.wg.Wait()
	m.client.Close()
	m.etcd.Close()
	return m.lock.unlock()
}

// maintain keeps the member's space in check until ctx ends: when the
// database takes more than half the quota it compacts all history, and
// when free pages take more than half the file (or the quota alarm went
// off) it defragments and clears the alarm. Auto-compaction keeps history
// short in normal operation; this is the backstop for bursts of churn.
func (m *Member) maintain(ctx context.Context) {
	ticker := time.NewTicker(m.cfg.MaintenanceInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		if err := m.maintainOnce(ctx); err != nil && ctx.Err() == nil {
			m.cfg.Logger.Warn("etcd maintenance", "err", err)
		}
	}
}

func (m *Member) maintainOnce(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.MaintenanceInterval+time.Minute)
	defer cancel()
	ep := m.Endpoint()
	status, err := m.client.Status(ctx, ep)
	if err != nil {
		return err
	}
	alarms, err := m.client.AlarmList(ctx)
	if err != nil {
		return err
	}
	noSpace := false
	for _, a := range alarms.Alarms {
		noSpace = noSpace || a.Alarm == etcdserverpb.AlarmType_NOSPACE
	}
	if noSpace || status.DbSizeInUse > m.cfg.QuotaBytes/2 {
		rev := status.Header.Revision
		if _, err := m.client.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil && !isCompacted(err) {
			return fmt.Errorf("compact to %d: %w", rev, err)
		}
		m.cfg.Logger.Info("etcd history compacted", "revision", rev, "db_in_use", status.DbSizeInUse)
	}
	if noSpace || status.DbSize-status.DbSizeInUse > status.DbSize/2 && status.DbSize > 16<<20 {
		if _, err := m.client.Defragment(ctx, ep); err != nil {
			return fmt.Errorf("defragment: %w", err)
		}
		m.cfg.Logger.Info("etcd defragmented", "db_size_before", status.DbSize)
	}
	if noSpace {
		if _, err := m.client.AlarmDisarm(ctx, &clientv3.AlarmMember{Alarm: etcdserverpb.AlarmType_NOSPACE}); err != nil {
			return fmt.Errorf("disarm space alarm: %w", err)
		}
		m.cfg.Logger.Warn("etcd space alarm cleared")
	}
	return nil
}

// isCompacted reports that the revision was already compacted, which for
// maintenance means there is nothing to do.
func isCompacted(err error) bool { return errors.Is(err, rpctypes.ErrCompacted) }

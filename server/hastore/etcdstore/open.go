package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/hastore/etcdmember"
)

// OpenConfig says where the store keeps its data: in an embedded etcd
// member on a local directory (alone, or one of a cluster of embedded
// members), or in an external etcd cluster.
type OpenConfig struct {
	// DataDir, when set, embeds an etcd member on this directory: a
	// single member (the default deployment), or one of a cluster when
	// Member.Peers or Member.Join is set. Exactly one of DataDir and
	// Endpoints is required.
	DataDir string
	// Endpoints, when set, are the client URLs of an external etcd
	// cluster.
	Endpoints []string
	// CACertFile, CertFile and KeyFile are the TLS options of the client
	// of an external cluster (see etcdmember.ClientConfig); Endpoints only.
	CACertFile, CertFile, KeyFile string
	// Username and Password authenticate the client of an external
	// cluster as an etcd user; Endpoints only.
	Username, Password string
	// Member tunes the embedded member; its Dir and Logger are taken from
	// this configuration.
	Member etcdmember.Config
	// Prefix is the key prefix (see Config). Default: DefaultPrefix.
	Prefix string
	// MaxPlanBytes limits an encoded plan. Default: hastore.DefaultMaxPlanBytes.
	MaxPlanBytes int
	// DialTimeout bounds connecting to etcd. Default: 5s.
	DialTimeout time.Duration
	// Logger receives the store's and etcd's logs. Default: slog.Default().
	Logger *slog.Logger
}

// Validate reports whether the configuration can be used.
func (c OpenConfig) Validate() error {
	if (c.DataDir == "") == (len(c.Endpoints) == 0) {
		return errors.New("hastore: exactly one of a data directory and etcd endpoints is required")
	}
	if c.MaxPlanBytes < 0 {
		return errors.New("hastore: plan limit must not be negative")
	}
	if c.DataDir == "" {
		return c.clientConfig().Validate()
	}
	if c.CACertFile != "" || c.CertFile != "" || c.KeyFile != "" || c.Username != "" || c.Password != "" {
		return errors.New("hastore: etcd TLS and authentication options apply to an external cluster (endpoints) only")
	}
	member := c.Member
	member.Dir = c.DataDir
	if err := member.Validate(); err != nil {
		return err
	}
	// A plan travels in one request with a few hundred bytes of keys and
	// compares; keep a generous margin.
	limit := int64(c.MaxPlanBytes)
	if limit == 0 {
		limit = hastore.DefaultMaxPlanBytes
	}
	if room := int64(member.WithDefaults().MaxRequestBytes) - 64<<10; limit > room {
		return fmt.Errorf("hastore: plan limit %d does not fit the member's request limit of %d bytes", limit, member.WithDefaults().MaxRequestBytes)
	}
	return nil
}

// clientConfig is the client of the external cluster.
func (c OpenConfig) clientConfig() etcdmember.ClientConfig {
	return etcdmember.ClientConfig{
		Endpoints: c.Endpoints, CACertFile: c.CACertFile, CertFile: c.CertFile, KeyFile: c.KeyFile,
		Username: c.Username, Password: c.Password, DialTimeout: c.DialTimeout, Logger: c.Logger,
	}
}

// Open opens the etcd store that cfg describes. The store owns what Open
// started: its Close closes the client and stops the embedded member.
//
// A store on an external cluster reads once under Prefix before it
// returns, so that a TLS, authentication or permission failure shows
// here, as an error that names the endpoints and the user.
//
// A store on an embedded member revokes, before it returns, the sessions
// that the process before it on DataDir opened (see SessionsFileName).
//
// A store on a member of a cluster of embedded members is a client of
// that member's client URL (over gRPC on its listener, as another process
// would be), not of the member in-process: a member cut off from its
// cluster's majority then fails the store's watches with etcd's
// "no leader" error instead of leaving them silent.
func Open(ctx context.Context, cfg OpenConfig) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	var (
		member *etcdmember.Member
		limits Config // of an external cluster: etcd's defaults
	)
	if cfg.DataDir != "" {
		mc := cfg.Member
		mc.Dir, mc.Logger = cfg.DataDir, cfg.Logger
		var err error
		if member, err = etcdmember.Start(ctx, mc); err != nil {
			return nil, err
		}
		mc = member.Config()
		limits.MaxTxnOps, limits.MaxRequestBytes = int(mc.MaxTxnOps), int(mc.MaxRequestBytes)
	}
	// A single embedded member is served in this process: its client
	// calls the server directly, without gRPC and a socket between them.
	// The in-process client bypasses etcd's gRPC interceptors, though,
	// and with them the "require leader" check that ends the watches of a
	// member cut off from its cluster: a clustered member gets a gRPC
	// client of its own listener.
	//
	// Watches never use the in-process client: its watch stream to the
	// server is a pair of Go channels with no flow control, which a storm
	// of watch cancellations (observations ended together) deadlocks for
	// good, silencing every watch of the process (etcd-io/etcd#18879,
	// #20716; TestWatchCancellationStormLeavesWatchesWorking). They go
	// over gRPC on the member's own listener, as a clustered member's do.
	var (
		client, watches *clientv3.Client
		err             error
	)
	switch {
	case member != nil && !member.Clustered():
		if watches, err = member.NewClient(); err == nil {
			client = member.LocalClient()
			client.Watcher = watches.Watcher
		}
	case member != nil:
		client, err = member.NewClient()
	default:
		client, err = etcdmember.NewClient(ctx, cfg.clientConfig())
		if err == nil {
			err = etcdmember.Probe(ctx, client, cfg.clientConfig(), cfg.Prefix)
			if err != nil {
				client.Close()
			}
		}
	}
	if err != nil {
		if member != nil {
			member.Close()
		}
		return nil, err
	}
	store, err := New(Config{
		Client: client, Prefix: cfg.Prefix, MaxPlanBytes: cfg.MaxPlanBytes, Logger: cfg.Logger,
		MaxTxnOps: limits.MaxTxnOps, MaxRequestBytes: limits.MaxRequestBytes,
	})
	if err != nil {
		client.Close()
		if watches != nil {
			watches.Close()
		}
		if member != nil {
			member.Close()
		}
		return nil, err
	}
	store.closers = append(store.closers, func() error {
		// An in-process client has no connection to close: its Close
		// answers the cancellation of its own context.
		if err := client.Close(); member == nil || !errors.Is(err, context.Canceled) {
			return err
		}
		if watches != nil {
			return watches.Close()
		}
		return nil
	})
	if member != nil && member.Clustered() {
		pctx, stop := context.WithCancel(context.Background())
		placed := make(chan struct{})
		go func() { defer close(placed); store.placeEtcdLeader(pctx, member) }()
		store.closers = append([]func() error{func() error { stop(); <-placed; return nil }}, store.closers...)
	}
	if member != nil {
		store.closers = append(store.closers, member.Close)
		store.own = &ownSessions{path: filepath.Join(cfg.DataDir, SessionsFileName)}
		store.revokePredecessors(ctx)
	}
	return store, nil
}

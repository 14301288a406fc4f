package hastore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// OpenConfig says where the store keeps its data: in an embedded etcd
// member on a local directory, or in an external etcd cluster.
type OpenConfig struct {
	// DataDir, when set, embeds a single etcd member on this directory
	// (the default deployment). Exactly one of DataDir and Endpoints is
	// required.
	DataDir string
	// Endpoints, when set, are the client URLs of an external etcd
	// cluster.
	Endpoints []string
	// Member tunes the embedded member; its Dir and Logger are taken from
	// this configuration.
	Member MemberConfig
	// Prefix is the key prefix (see EtcdConfig). Default: DefaultPrefix.
	Prefix string
	// MaxPlanBytes limits an encoded plan. Default: DefaultMaxPlanBytes.
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
	if c.DataDir != "" {
		// A plan travels in one request with a few hundred bytes of keys
		// and compares; keep a generous margin.
		limit := int64(c.MaxPlanBytes)
		if limit == 0 {
			limit = DefaultMaxPlanBytes
		}
		if room := int64(c.Member.withDefaults().MaxRequestBytes) - 64<<10; limit > room {
			return fmt.Errorf("hastore: plan limit %d does not fit the member's request limit of %d bytes", limit, c.Member.withDefaults().MaxRequestBytes)
		}
	}
	return nil
}

// Open opens the etcd store that cfg describes. The store owns what Open
// started: its Close closes the client and stops the embedded member.
func Open(ctx context.Context, cfg OpenConfig) (*Etcd, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	var (
		member *Member
		limits EtcdConfig // of an external cluster: etcd's defaults
	)
	if cfg.DataDir != "" {
		mc := cfg.Member
		mc.Dir, mc.Logger = cfg.DataDir, cfg.Logger
		var err error
		if member, err = StartMember(ctx, mc); err != nil {
			return nil, err
		}
		mc = mc.withDefaults()
		limits.MaxTxnOps, limits.MaxRequestBytes = int(mc.MaxTxnOps), int(mc.MaxRequestBytes)
	}
	// The embedded member is served in this process: its client calls the
	// server directly, without gRPC and a socket between them.
	var client *clientv3.Client
	if member != nil {
		client = member.LocalClient()
	} else {
		c, err := clientv3.New(clientv3.Config{
			Endpoints:   cfg.Endpoints,
			DialTimeout: cfg.DialTimeout,
			Context:     context.WithoutCancel(ctx),
			Logger:      zapToSlog(cfg.Logger),
		})
		if err != nil {
			return nil, fmt.Errorf("hastore: etcd client: %w", err)
		}
		client = c
	}
	store, err := NewEtcd(EtcdConfig{
		Client: client, Prefix: cfg.Prefix, MaxPlanBytes: cfg.MaxPlanBytes, Logger: cfg.Logger,
		MaxTxnOps: limits.MaxTxnOps, MaxRequestBytes: limits.MaxRequestBytes,
	})
	if err != nil {
		client.Close()
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
		return nil
	})
	if member != nil {
		store.closers = append(store.closers, member.Close)
	}
	return store, nil
}

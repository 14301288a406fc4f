package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/hastore/hastorerpc"
	"github.com/jobplane/jobplane/server/internal/endpoint"
)

// storeFlags choose and tune the HA store of a server subcommand.
type storeFlags struct {
	hastoreURL   string // a remote HAStoreService instead of etcd; only where registered
	dataDir      string
	endpoints    string
	prefix       string
	maxPlanBytes int
	quotaBytes   int64
}

func (s *storeFlags) register(fs *flag.FlagSet, defaultDataDir string) {
	fs.StringVar(&s.dataDir, "data-dir", defaultDataDir, "embed a single etcd member on this directory (ignored with -etcd-endpoints)")
	fs.StringVar(&s.endpoints, "etcd-endpoints", "", "comma-separated client URLs of an external etcd cluster, instead of the embedded member")
	fs.StringVar(&s.prefix, "etcd-prefix", hastore.DefaultPrefix, "key prefix, so several clusters can share one etcd")
	fs.IntVar(&s.maxPlanBytes, "max-plan-bytes", hastore.DefaultMaxPlanBytes, "largest encoded execution plan accepted")
	fs.Int64Var(&s.quotaBytes, "quota-bytes", 2<<30, "space quota of the embedded member")
}

// registerRemote adds -hastore, for subcommands that can use an HA store
// served by another process.
func (s *storeFlags) registerRemote(fs *flag.FlagSet) {
	fs.StringVar(&s.hastoreURL, "hastore", "", "base URL of an HAStoreService (another process's HA store) to use instead of etcd")
}

// openConfig describes the etcd store the flags choose: the embedded
// member on -data-dir, or the external cluster at -etcd-endpoints.
func (s *storeFlags) openConfig(log *slog.Logger) hastore.OpenConfig {
	cfg := hastore.OpenConfig{
		Prefix:       s.prefix,
		MaxPlanBytes: s.maxPlanBytes,
		Member:       hastore.MemberConfig{QuotaBytes: s.quotaBytes},
		Logger:       log,
	}
	if s.endpoints != "" {
		cfg.Endpoints = strings.Split(s.endpoints, ",")
	} else {
		cfg.DataDir = s.dataDir
	}
	return cfg
}

// open opens the store the flags describe.
func (s *storeFlags) open(ctx context.Context, log *slog.Logger) (hastore.Store, error) {
	if s.hastoreURL != "" {
		log.Info("ha store served remotely", "url", s.hastoreURL)
		return hastorerpc.NewClient(hastorerpc.ClientConfig{HTTPClient: endpoint.NewClient(), BaseURL: s.hastoreURL, Options: endpoint.ClientOptions(), Logger: log}), nil
	}
	cfg := s.openConfig(log)
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	store, err := hastore.Open(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open ha store: %w", err)
	}
	if s.endpoints != "" {
		log.Info("ha store on external etcd", "endpoints", cfg.Endpoints, "prefix", s.prefix)
	} else {
		log.Info("ha store on embedded etcd", "data_dir", s.dataDir, "prefix", s.prefix)
	}
	return store, nil
}

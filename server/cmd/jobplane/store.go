package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/hastore/etcdmember"
	"github.com/jobplane/jobplane/server/hastore/etcdstore"
	"github.com/jobplane/jobplane/server/hastore/hastorerpc"
	"github.com/jobplane/jobplane/server/internal/endpoint"
)

// etcdClientFlags say how to reach an external etcd cluster as a client,
// with the security options of etcd's own clients.
type etcdClientFlags struct {
	endpoints    string
	cacert       string
	cert         string
	key          string
	user         string
	passwordFile string
}

func (e *etcdClientFlags) register(fs *flag.FlagSet, endpointsUsage string) {
	fs.StringVar(&e.endpoints, "etcd-endpoints", "", endpointsUsage)
	fs.StringVar(&e.cacert, "etcd-cacert", "", "PEM file of the certificate authorities that sign the etcd servers' certificates (https endpoints; default: the system's)")
	fs.StringVar(&e.cert, "etcd-cert", "", "PEM client certificate to present to etcd (with -etcd-key), for clusters that require client certificates")
	fs.StringVar(&e.key, "etcd-key", "", "PEM key of -etcd-cert")
	fs.StringVar(&e.user, "etcd-user", "", "etcd user to authenticate as (with -etcd-password-file)")
	fs.StringVar(&e.passwordFile, "etcd-password-file", "", "file holding the password of -etcd-user (its first line; the password never goes on the command line)")
}

// securitySet reports whether any TLS or authentication flag is set.
func (e *etcdClientFlags) securitySet() bool {
	return e.cacert != "" || e.cert != "" || e.key != "" || e.user != "" || e.passwordFile != ""
}

// config returns the client configuration the flags describe, reading
// the password file; it fails on flags that do not go together and on
// files that cannot be read.
func (e *etcdClientFlags) config(log *slog.Logger) (etcdmember.ClientConfig, error) {
	cfg := etcdmember.ClientConfig{CACertFile: e.cacert, CertFile: e.cert, KeyFile: e.key, Username: e.user, Logger: log}
	if e.endpoints != "" {
		cfg.Endpoints = strings.Split(e.endpoints, ",")
	}
	switch {
	case e.endpoints == "" && e.securitySet():
		return cfg, errors.New("-etcd-cacert, -etcd-cert, -etcd-key, -etcd-user and -etcd-password-file apply to an external cluster: set -etcd-endpoints")
	case e.cert != "" && e.key == "":
		return cfg, errors.New("-etcd-cert needs -etcd-key")
	case e.key != "" && e.cert == "":
		return cfg, errors.New("-etcd-key needs -etcd-cert")
	case e.user != "" && e.passwordFile == "":
		return cfg, errors.New("-etcd-user needs -etcd-password-file")
	case e.passwordFile != "" && e.user == "":
		return cfg, errors.New("-etcd-password-file needs -etcd-user")
	}
	if e.passwordFile != "" {
		b, err := os.ReadFile(e.passwordFile)
		if err != nil {
			return cfg, fmt.Errorf("-etcd-password-file: %w", err)
		}
		cfg.Password, _, _ = strings.Cut(string(b), "\n")
		cfg.Password = strings.TrimSuffix(cfg.Password, "\r")
		if cfg.Password == "" {
			return cfg, fmt.Errorf("-etcd-password-file %s: empty password", e.passwordFile)
		}
	}
	if e.endpoints == "" {
		return cfg, nil
	}
	if err := cfg.Validate(); err != nil {
		return cfg, err
	}
	// Read the certificates now, before anything starts.
	_, err := cfg.TLSConfig()
	return cfg, err
}

// storeFlags choose and tune the HA store of a server subcommand.
type storeFlags struct {
	hastoreURL   string // a remote HAStoreService instead of etcd; only where registered
	dataDir      string
	client       etcdClientFlags
	prefix       string
	maxPlanBytes int
	quotaBytes   int64

	// The embedded member as one of a cluster.
	name              string
	peers             string
	peerListen        string
	clientListen      string
	join              string
	heartbeatInterval time.Duration
	electionTimeout   time.Duration
	// Set by useTLS from the process's listen flags.
	peerTLS  etcdmember.PeerTLS
	insecure bool
}

// useTLS gives the embedded member's https:// peers the process's own
// certificate (-tls-cert, -tls-key) and trust (-tls-client-ca, or else
// -tls-ca), and lets -insecure allow plain-HTTP peers off loopback.
func (s *storeFlags) useTLS(l listenFlags) {
	ca := l.cfg.ClientCAFile
	if ca == "" {
		ca = l.caFile
	}
	s.peerTLS = etcdmember.PeerTLS{CertFile: l.cfg.TLSCertFile, KeyFile: l.cfg.TLSKeyFile, CAFile: ca}
	s.insecure = l.security.insecure
}

// memberTLS returns the peer TLS of the embedded member of peers (this
// one is named name): the process's with https:// peer URLs, none with
// http:// ones, which are refused off loopback without -insecure.
func (s *storeFlags) memberTLS(name string, peers []etcdmember.Peer) (etcdmember.PeerTLS, error) {
	for _, p := range peers {
		if p.Name != name {
			continue
		}
		if strings.HasPrefix(p.URL, "https://") {
			if s.peerTLS.CertFile == "" || s.peerTLS.CAFile == "" {
				return etcdmember.PeerTLS{}, errors.New("-etcd-peers with https:// URLs needs -tls-cert and -tls-key (the member's certificate towards its peers) and -tls-client-ca or -tls-ca (the authorities of the peers' certificates)")
			}
			return s.peerTLS, nil
		}
		var hosts []string // where the member is reached, and what it binds
		if u, err := url.Parse(p.URL); err == nil {
			hosts = append(hosts, u.Hostname())
		}
		if h, _, err := net.SplitHostPort(s.peerListen); err == nil {
			hosts = append(hosts, h)
		}
		for _, h := range hosts {
			if !loopback(h) && !s.insecure {
				return etcdmember.PeerTLS{}, fmt.Errorf("the embedded member's peer URL %s (or -etcd-peer-listen) is not on loopback, and plain HTTP lets anyone who reaches it into the HA store's raft traffic: "+
					"use https:// peer URLs (the member then uses -tls-cert, -tls-key and -tls-client-ca towards its peers), or pass -insecure on a network you trust", p.URL)
			}
		}
	}
	return etcdmember.PeerTLS{}, nil
}

func (s *storeFlags) register(fs *flag.FlagSet, defaultDataDir string) {
	fs.StringVar(&s.dataDir, "data-dir", defaultDataDir, "embed an etcd member on this directory (ignored with -etcd-endpoints); a directory that holds a member restarts it with its data")
	s.client.register(fs, "comma-separated client URLs of an external etcd cluster, instead of the embedded member")
	fs.StringVar(&s.prefix, "etcd-prefix", etcdstore.DefaultPrefix, "key prefix, so several clusters can share one etcd")
	fs.IntVar(&s.maxPlanBytes, "max-plan-bytes", hastore.DefaultMaxPlanBytes, "largest encoded execution plan accepted")
	fs.Int64Var(&s.quotaBytes, "quota-bytes", 2<<30, "space quota of the embedded member")
	fs.StringVar(&s.name, "etcd-name", "", "name of the embedded member in its cluster (default \"jobplane\")")
	fs.StringVar(&s.peers, "etcd-peers", "", "the embedded members' initial cluster, name1=https://host1:2380,name2=...: this member (-etcd-name) bootstraps it with the others, listening on its own entry's URL; https:// peers talk mutual TLS with the process's -tls-cert, -tls-key and -tls-client-ca (or -tls-ca); http:// ones plain HTTP, refused off loopback without -insecure; empty: a single member on its own")
	fs.StringVar(&s.peerListen, "etcd-peer-listen", "", "host:port the member's peer listener binds (default: the host:port of its -etcd-peers entry)")
	fs.StringVar(&s.clientListen, "etcd-client-listen", "127.0.0.1:0", "host:port of the embedded member's etcd client listener (for etcdctl, backups, and members joining through it)")
	fs.StringVar(&s.join, "etcd-join", "", "comma-separated client URLs of running members: on an empty -data-dir, add this member (its -etcd-peers entry) to their cluster and start as its new member")
	fs.DurationVar(&s.heartbeatInterval, "etcd-heartbeat-interval", 0, "etcd leader heartbeat interval (default 10ms for a single member, 50ms in a cluster)")
	fs.DurationVar(&s.electionTimeout, "etcd-election-timeout", 0, "etcd election timeout, at least 5 heartbeat intervals (default 100ms for a single member, 500ms in a cluster; keep it well below -session-ttl)")
}

// registerRemote adds -hastore, for subcommands that can use an HA store
// served by another process.
func (s *storeFlags) registerRemote(fs *flag.FlagSet) {
	fs.StringVar(&s.hastoreURL, "hastore", "", "base URL of an HAStoreService (another process's HA store) to use instead of etcd")
}

// clusterSet reports whether a flag of a clustered embedded member is set.
func (s *storeFlags) clusterSet() bool {
	return s.name != "" || s.peers != "" || s.peerListen != "" || s.join != "" || s.clientListen != "127.0.0.1:0" ||
		s.heartbeatInterval != 0 || s.electionTimeout != 0
}

// validate checks the flags, and reads the files they name, before
// anything starts.
func (s *storeFlags) validate() error {
	_, err := s.openConfig(slog.Default())
	return err
}

// openConfig describes the etcd store the flags choose: the embedded
// member on -data-dir (alone, or one of the cluster of -etcd-peers), or
// the external cluster at -etcd-endpoints. It fails on flags that do not
// go together and on files that cannot be read.
func (s *storeFlags) openConfig(log *slog.Logger) (etcdstore.OpenConfig, error) {
	cfg := etcdstore.OpenConfig{
		Prefix:       s.prefix,
		MaxPlanBytes: s.maxPlanBytes,
		Logger:       log,
	}
	switch {
	case s.hastoreURL != "" && (s.client.endpoints != "" || s.client.securitySet() || s.clusterSet()):
		return cfg, errors.New("-hastore uses another process's HA store: drop the -etcd-* flags")
	case s.client.endpoints != "" && s.clusterSet():
		return cfg, errors.New("-etcd-name, -etcd-peers, -etcd-peer-listen, -etcd-client-listen, -etcd-join and the etcd timings configure the embedded member: drop them with -etcd-endpoints")
	case s.peers != "" && s.name == "":
		return cfg, errors.New("-etcd-peers needs -etcd-name, this member's name in it")
	case s.join != "" && s.peers == "":
		return cfg, errors.New("-etcd-join needs this member's peer URL: -etcd-peers with an entry for -etcd-name")
	}
	client, err := s.client.config(log)
	if err != nil {
		return cfg, err
	}
	cfg.Endpoints = client.Endpoints
	cfg.CACertFile, cfg.CertFile, cfg.KeyFile = client.CACertFile, client.CertFile, client.KeyFile
	cfg.Username, cfg.Password = client.Username, client.Password
	if s.client.endpoints == "" {
		cfg.DataDir = s.dataDir
		peers, err := etcdmember.ParsePeers(s.peers)
		if err != nil {
			return cfg, fmt.Errorf("-etcd-peers: %w", err)
		}
		peerTLS, err := s.memberTLS(s.name, peers)
		if err != nil {
			return cfg, err
		}
		if h, _, err := net.SplitHostPort(s.clientListen); err == nil && !loopback(h) && !s.insecure {
			return cfg, fmt.Errorf("-etcd-client-listen %s is not on loopback, and the embedded member's client port, plain HTTP, gives whoever reaches it the whole HA store: "+
				"keep it on loopback (the default), or pass -insecure on a network you trust (a member that joins with -etcd-join needs a client URL it can reach)", s.clientListen)
		}
		cfg.Member = etcdmember.Config{
			Name: s.name, Peers: peers, PeerAddr: s.peerListen, ClientAddr: s.clientListen, PeerTLS: peerTLS,
			HeartbeatInterval: s.heartbeatInterval, ElectionTimeout: s.electionTimeout,
			QuotaBytes: s.quotaBytes,
		}
		if s.join != "" {
			cfg.Member.Join = strings.Split(s.join, ",")
		}
	}
	if s.hastoreURL != "" {
		return cfg, nil
	}
	return cfg, cfg.Validate()
}

// open opens the store the flags describe; a remote one is called with
// client.
func (s *storeFlags) open(ctx context.Context, client *http.Client, log *slog.Logger) (hastore.Store, error) {
	if s.hastoreURL != "" {
		log.Info("ha store served remotely", "url", s.hastoreURL)
		return hastorerpc.NewClient(hastorerpc.ClientConfig{HTTPClient: client, BaseURL: s.hastoreURL, Options: endpoint.ClientOptions(), Logger: log}), nil
	}
	cfg, err := s.openConfig(log)
	if err != nil {
		return nil, err
	}
	// A member of a new cluster waits for a majority of its peers, which
	// may be started by hand one after the other.
	timeout := time.Minute
	if len(cfg.Member.Peers) > 0 {
		timeout = 10 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	store, err := etcdstore.Open(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open ha store: %w", err)
	}
	switch {
	case cfg.DataDir == "":
		log.Info("ha store on external etcd", "endpoints", cfg.Endpoints, "prefix", s.prefix, "tls", cfg.CACertFile != "" || cfg.CertFile != "", "user", cfg.Username)
	case len(cfg.Member.Peers) > 0:
		log.Info("ha store on an embedded etcd member of a cluster", "data_dir", s.dataDir, "name", s.name, "peers", s.peers, "client_listen", s.clientListen, "prefix", s.prefix)
	default:
		log.Info("ha store on embedded etcd", "data_dir", s.dataDir, "prefix", s.prefix)
	}
	return store, nil
}

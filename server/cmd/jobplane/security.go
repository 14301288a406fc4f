package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"strings"

	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
	"github.com/jobplane/jobplane/server/internal/endpoint"
)

// securityFlags close a server process to those who do not belong: the
// refusal to serve a non-loopback address in the clear, and client
// certificates (mutual TLS) between the cluster's components.
type securityFlags struct {
	insecure bool
	// clusterListen, clusterAdvertise and clusterAddrFile describe the
	// cluster endpoint, where registerCluster offers it.
	clusterListen, clusterAdvertise, clusterAddrFile string
	// files is the TLS of the process's calls to others: -tls-ca, and
	// -tls-cert and -tls-key as its client certificate; read by check.
	files *endpoint.ClientTLS
}

func (s *securityFlags) register(fs *flag.FlagSet, cfg *endpoint.Config) {
	fs.BoolVar(&s.insecure, "insecure", false, "allow listening on an address other than loopback (127.0.0.0/8, ::1, localhost) without TLS: "+
		"anyone who reaches the port can then run the cluster's protocol (campaign, offer slots, run tasks); without it such a -listen is refused. "+
		"Use it only on a network you trust")
	fs.StringVar(&cfg.ClientCAFile, "tls-client-ca", "", "PEM `file` of the certificate authorities that sign the cluster's components' certificates (mutual TLS; needs -tls-cert): "+
		"the cluster's services here (HA store, ResourceManager, JobMaster, TaskExecutor) then answer only callers presenting a certificate they signed, "+
		"and a handshake with a certificate they did not sign fails; the Dispatcher, health, reflection and /metrics stay open to any TLS client. "+
		"Every process presents its -tls-cert as its client certificate, so certificates need both the serverAuth and clientAuth usages (see jobplane certs ca|issue). "+
		"Certificates, keys and CA files are read again when they change, for new connections")
}

// registerCluster adds the flags of a second, cluster endpoint, for a
// process that serves a public API beside the cluster protocol.
func (s *securityFlags) registerCluster(fs *flag.FlagSet) {
	fs.StringVar(&s.clusterListen, "cluster-listen", "", "address to serve the cluster protocol on (ResourceManager, JobMaster and HA store, with health and reflection), apart from the public API: "+
		"-listen then serves only the Dispatcher, health, reflection and /metrics; TaskExecutors (-hastore) and other jobmanagers call this one. "+
		"Same TLS as -listen (-tls-cert, -tls-client-ca). Default: none, everything on -listen")
	fs.StringVar(&s.clusterAdvertise, "cluster-advertise", "", "base URL at which the cluster's processes reach -cluster-listen, as -advertise is for -listen; "+
		"published in the leader record beside -advertise (default http:// or https:// and the bound address)")
	fs.StringVar(&s.clusterAddrFile, "cluster-listen-addr-file", "", "write the address -cluster-listen bound to this file once listening")
}

// clusterConfig returns the cluster endpoint's configuration: that of
// the public endpoint, cfg, on -cluster-listen.
func (s *securityFlags) clusterConfig(cfg endpoint.Config) endpoint.Config {
	cfg.Listen, cfg.Advertise, cfg.AddrFile, cfg.PublicServices = s.clusterListen, s.clusterAdvertise, s.clusterAddrFile, nil
	return cfg
}

// listen opens the endpoint of cfg and, with -cluster-listen, the
// cluster endpoint beside it (see endpoint.Endpoint.SetCluster).
func (s *securityFlags) listen(cfg endpoint.Config, log *slog.Logger) (*endpoint.Endpoint, error) {
	ep, err := endpoint.Listen(cfg, log)
	if err != nil || s.clusterListen == "" {
		return ep, err
	}
	cluster, err := endpoint.Listen(s.clusterConfig(cfg), log.With("surface", "cluster"))
	if err != nil {
		ep.Close()
		return nil, fmt.Errorf("-cluster-listen: %w", err)
	}
	ep.SetCluster(cluster)
	return ep, nil
}

// check refuses -listen on a non-loopback address in the clear without
// -insecure, and -tls-client-ca without TLS, and reads the files of the
// process's client TLS. cfg is the endpoint's configuration; caFile is
// -tls-ca.
func (s *securityFlags) check(cfg *endpoint.Config, caFile string) error {
	if cfg.ClientCAFile != "" && cfg.TLSCertFile == "" {
		return errors.New("-tls-client-ca needs -tls-cert and -tls-key: client certificates are part of TLS, and the process presents its own -tls-cert to others")
	}
	if err := s.checkCleartext("listen", cfg.Listen, cfg.TLSCertFile != ""); err != nil {
		return err
	}
	if s.clusterListen == "" && (s.clusterAdvertise != "" || s.clusterAddrFile != "") {
		return errors.New("-cluster-advertise and -cluster-listen-addr-file describe -cluster-listen: set it")
	}
	if s.clusterListen != "" {
		err := s.clusterConfig(*cfg).Validate()
		if errors.Is(err, endpoint.ErrAdvertiseRequired) {
			return fmt.Errorf("-cluster-listen %s binds every interface, an address no one can reach: set -cluster-advertise to the base URL that the cluster's processes reach it at", s.clusterListen)
		}
		if err != nil {
			return fmt.Errorf("-cluster-listen: %w", err)
		}
		if err := s.checkCleartext("cluster-listen", s.clusterListen, cfg.TLSCertFile != ""); err != nil {
			return err
		}
	}
	cfg.PublicServices = []string{jobplanev1connect.DispatcherServiceName}
	files, err := endpoint.NewClientTLS(endpoint.ClientFiles{CAFile: caFile, CertFile: cfg.TLSCertFile, KeyFile: cfg.TLSKeyFile}, nil)
	if err != nil {
		if caFile != "" && strings.Contains(err.Error(), "authorities") {
			return fmt.Errorf("-tls-ca: %w", err)
		}
		return err
	}
	s.files = files
	return nil
}

// checkCleartext refuses to serve addr (the value of -flagName) in the
// clear unless it is a loopback address or -insecure is set.
func (s *securityFlags) checkCleartext(flagName, addr string, tls bool) error {
	if tls || s.insecure {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil || loopback(host) {
		return nil // a malformed address is reported by the endpoint's checks
	}
	return fmt.Errorf("-%s %s is not a loopback address, and serving it without TLS lets anyone who reaches it campaign, offer slots and run tasks: "+
		"serve TLS with -tls-cert and -tls-key (and client certificates with -tls-client-ca; `jobplane certs` makes test ones), "+
		"or pass -insecure to serve in the clear on a network you trust", flagName, addr)
}

// loopback reports whether host is a loopback address: 127.0.0.0/8, ::1
// or localhost. An unspecified address (every interface) and any other
// name are not.
func loopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

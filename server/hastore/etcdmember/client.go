package etcdmember

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ClientConfig says how to reach an etcd cluster as a client, with
// the security options etcd clients (etcdctl) have: TLS, client
// certificates, and etcd's user authentication.
type ClientConfig struct {
	// Endpoints are the cluster's client URLs. Required.
	Endpoints []string
	// CACertFile is a PEM file of the certificate authorities that sign
	// the servers' certificates (etcdctl's --cacert). Default: the
	// system's roots, for https endpoints.
	CACertFile string
	// CertFile and KeyFile are the PEM client certificate and key that
	// the client presents (etcdctl's --cert and --key), for clusters that
	// authenticate clients by certificate. Both or neither.
	CertFile, KeyFile string
	// Username and Password authenticate the client to etcd (etcdctl's
	// --user). Both or neither.
	Username, Password string
	// DialTimeout bounds connecting and authenticating. Default: 5s.
	DialTimeout time.Duration
	// Logger receives the client's logs. Default: slog.Default().
	Logger *slog.Logger
}

// tlsSet reports whether any TLS option is set.
func (c ClientConfig) tlsSet() bool {
	return c.CACertFile != "" || c.CertFile != "" || c.KeyFile != ""
}

// authSet reports whether any authentication option is set.
func (c ClientConfig) authSet() bool { return c.Username != "" || c.Password != "" }

// Validate reports whether the configuration can be used, without reading
// the files it names (TLSConfig does).
func (c ClientConfig) Validate() error {
	if len(c.Endpoints) == 0 {
		return errors.New("hastore: etcd endpoints are required")
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return errors.New("hastore: an etcd client certificate needs its key, and a key its certificate")
	}
	if c.Username == "" && c.Password != "" {
		return errors.New("hastore: an etcd password needs a user name")
	}
	if c.Username != "" && c.Password == "" {
		return fmt.Errorf("hastore: etcd user %q has no password", c.Username)
	}
	if c.DialTimeout < 0 {
		return errors.New("hastore: etcd dial timeout must not be negative")
	}
	for _, ep := range c.Endpoints {
		if !strings.Contains(ep, "://") {
			// host:port, as etcdctl takes it: TLS when TLS options are set.
			if _, _, err := net.SplitHostPort(ep); err != nil {
				return fmt.Errorf("hastore: etcd endpoint %q: want a URL such as https://host:2379: %w", ep, err)
			}
			continue
		}
		u, err := url.Parse(ep)
		if err != nil || u.Host == "" {
			return fmt.Errorf("hastore: etcd endpoint %q: want a URL such as https://host:2379", ep)
		}
		switch u.Scheme {
		case "https":
		case "http":
			// etcd's client drops TLS for an http endpoint.
			if c.tlsSet() {
				return fmt.Errorf("hastore: etcd endpoint %q is plain http but TLS options are set: use https://", ep)
			}
		default:
			return fmt.Errorf("hastore: etcd endpoint %q: want an http:// or https:// URL", ep)
		}
	}
	return nil
}

// TLSConfig reads the certificate files and returns the client's TLS
// configuration: nil when no TLS option is set (plain or system-rooted
// https), an error naming the file when one cannot be read or parsed.
func (c ClientConfig) TLSConfig() (*tls.Config, error) {
	if !c.tlsSet() {
		return nil, nil
	}
	info := transport.TLSInfo{CertFile: c.CertFile, KeyFile: c.KeyFile, TrustedCAFile: c.CACertFile}
	cfg, err := info.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("hastore: etcd client TLS (cacert %q, cert %q, key %q): %w", c.CACertFile, c.CertFile, c.KeyFile, err)
	}
	return cfg, nil
}

// NewClient returns a client of the cluster cfg describes; the caller
// closes it. It authenticates at once when a user is set, so a wrong
// password fails here; a TLS or connection failure shows on the first
// call (see Open, which makes one).
func NewClient(ctx context.Context, cfg ClientConfig) (*clientv3.Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	tlsCfg, err := cfg.TLSConfig()
	if err != nil {
		return nil, err
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   cfg.Endpoints,
		TLS:         tlsCfg,
		Username:    cfg.Username,
		Password:    cfg.Password,
		DialTimeout: cfg.DialTimeout,
		Context:     context.WithoutCancel(ctx),
		Logger:      zapToSlog(cfg.Logger),
	})
	if err != nil {
		return nil, fmt.Errorf("hastore: etcd client of %v%s: %w", cfg.Endpoints, asUser(cfg.Username), explain(ctx, cfg, err))
	}
	return c, nil
}

// Probe reads under prefix with client, a client of the cluster cfg
// describes, within cfg.DialTimeout, so that a TLS, authentication or
// permission failure shows before the client is used. Its error names the
// endpoints, the user and the prefix, and says why the endpoints cannot be
// reached when that can be found out.
func Probe(ctx context.Context, client *clientv3.Client, cfg ClientConfig, prefix string) error {
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	pctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	defer cancel()
	_, err := client.Get(pctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("hastore: etcd at %v%s: read under %q: %w", cfg.Endpoints, asUser(cfg.Username), prefix, explain(ctx, cfg, err))
}

// explain adds to err, when a call timed out or found no connection,
// why the endpoints cannot be reached: etcd's client retries until its
// deadline and then reports only that, while the cause (a refused
// connection, an untrusted server certificate, a client certificate the
// server refused) is what the operator needs.
func explain(ctx context.Context, cfg ClientConfig, err error) error {
	if !errors.Is(err, context.DeadlineExceeded) && status.Code(err) != codes.Unavailable && status.Code(err) != codes.DeadlineExceeded {
		return err
	}
	tlsCfg, terr := cfg.TLSConfig()
	if terr != nil {
		return err
	}
	var causes []error
	for _, ep := range cfg.Endpoints {
		if cause := dialCheck(ctx, ep, tlsCfg); cause != nil {
			causes = append(causes, fmt.Errorf("%s: %w", ep, cause))
		}
	}
	if len(causes) == 0 {
		return err
	}
	return fmt.Errorf("%w (%w)", err, errors.Join(causes...))
}

// dialCheck connects to the endpoint as the client would, and returns
// what fails: the connection, the TLS handshake, or the server's verdict
// on the client's certificate, which a TLS 1.3 server sends after the
// handshake, as an alert on the first read.
func dialCheck(ctx context.Context, ep string, tlsCfg *tls.Config) error {
	host, secure := ep, tlsCfg != nil
	if u, err := url.Parse(ep); err == nil && strings.Contains(ep, "://") {
		host, secure = u.Host, u.Scheme == "https"
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if !secure {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", host)
		if err != nil {
			return err
		}
		return conn.Close()
	}
	if tlsCfg == nil {
		tlsCfg = &tls.Config{}
	}
	tlsCfg = tlsCfg.Clone()
	tlsCfg.NextProtos = []string{"h2"}
	d := tls.Dialer{Config: tlsCfg}
	conn, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := conn.Read(make([]byte, 1)); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil // the server waits for the client to speak: TLS is fine
		}
		return err
	}
	return nil
}

func asUser(name string) string {
	if name == "" {
		return ""
	}
	return fmt.Sprintf(" as user %q", name)
}

package endpoint

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/jobplane/jobplane/sdk/wire/transport"
)

// ClientFiles name the TLS files of a process's calls to other processes.
type ClientFiles struct {
	// CAFile is the PEM file of the certificate authorities that sign the
	// peers' certificates, trusted instead of the system's roots. Default:
	// none, the system's roots.
	CAFile string
	// CertFile and KeyFile (both or neither) are the PEM certificate and
	// key the process presents to a peer that asks for a client
	// certificate (an endpoint with Config.ClientCAFile). The certificate
	// needs the clientAuth extended key usage. Default: none, no client
	// certificate.
	CertFile, KeyFile string
}

// ClientTLS is the TLS of a process's calls to https:// peers, read from
// ClientFiles and read again when they change: each new connection uses
// the files as they are then (a file that turned bad leaves the last good
// one in use, logged). Connections already open keep theirs.
type ClientTLS struct {
	roots *reloading[*x509.CertPool] // nil: the system's roots
	cert  *reloading[*tls.Certificate]
}

// NewClientTLS reads the files; it fails on half a pair, an unreadable or
// bad file, or a key that does not match its certificate. Reload errors
// go to log (nil: slog's default logger).
func NewClientTLS(files ClientFiles, log *slog.Logger) (*ClientTLS, error) {
	roots, err := newPool(files.CAFile, log)
	if err != nil {
		return nil, err
	}
	cert, err := newKeyPair(files.CertFile, files.KeyFile, log)
	if err != nil {
		return nil, err
	}
	return &ClientTLS{roots: roots, cert: cert}, nil
}

// config returns the TLS configuration of one new connection to
// serverName.
func (c *ClientTLS) config(serverName string) *tls.Config {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName, NextProtos: []string{"h2", "http/1.1"}}
	if c.roots != nil {
		cfg.RootCAs = c.roots.get()
	}
	if c.cert != nil {
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return c.cert.get(), nil }
	}
	return cfg
}

// NewClient is transport.NewClient with the files' TLS: it trusts CAFile
// and presents CertFile when a peer asks for a client certificate. A nil
// ClientTLS gives transport.NewClient(nil).
func (c *ClientTLS) NewClient() *http.Client {
	if c == nil {
		return transport.NewClient(nil)
	}
	dialer := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	// A transport cannot take a new configuration per connection, so the
	// connection is dialed and its handshake made here, with the files as
	// they are now; net/http then speaks HTTP/2 or HTTP/1.1 as the
	// handshake's ALPN chose.
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		raw, err := dialer.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		conn := tls.Client(raw, c.config(host))
		if err := conn.HandshakeContext(ctx); err != nil {
			raw.Close()
			return nil, err
		}
		return conn, nil
	}
	return &http.Client{Transport: transport.New(transport.Config{DialTLS: dial})}
}

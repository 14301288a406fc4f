// Package transport is the one HTTP transport of jobplane's clients and
// components: http:// URLs over unencrypted HTTP/2 with prior knowledge
// (h2c), so that every call between two processes shares one connection,
// and https:// URLs over TLS with HTTP/2 or HTTP/1.1 as ALPN settles it.
// The SDK's Client, the SDK's worker and the server's components all call
// through it.
//
// One net/http transport cannot do both: with HTTP/1.1 enabled (as TLS
// peers may need) it would speak HTTP/1.1 to http:// URLs too, so a
// Transport holds one for each scheme.
package transport

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/url"
	"time"
)

// Config shapes a Transport. The zero Config is the transport components
// use between themselves.
type Config struct {
	// TLS is the TLS configuration of https:// calls (its roots, a client
	// certificate). Nil trusts the system's roots. It is cloned.
	TLS *tls.Config
	// HTTP1 makes every call HTTP/1.1: http:// URLs without h2c, and
	// https:// ones without HTTP/2. Default: false.
	HTTP1 bool
	// Proxy, if set, chooses a proxy per request, as http.Transport.Proxy
	// does (http.ProxyFromEnvironment for programs run by users). Default:
	// no proxy.
	Proxy func(*http.Request) (*url.URL, error)
	// DialTLS, if set, dials https:// peers and makes the TLS handshake
	// itself (TLS is then unused), as http.Transport.DialTLSContext does:
	// for a configuration that changes between connections, such as
	// certificate files reloaded when they change. Default: net/http's.
	DialTLS func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Transport is an http.RoundTripper that sends each request by its URL's
// scheme.
type Transport struct {
	plain, secure *http.Transport
}

// New returns a Transport for cfg.
func New(cfg Config) *Transport {
	base := func() *http.Transport {
		return &http.Transport{
			Proxy:               cfg.Proxy,
			TLSClientConfig:     cfg.TLS.Clone(),
			MaxIdleConnsPerHost: 16,
			IdleConnTimeout:     90 * time.Second,
			TLSHandshakeTimeout: 10 * time.Second,
			DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		}
	}
	plain, secure := base(), base()
	if cfg.DialTLS != nil {
		secure.TLSClientConfig, secure.DialTLSContext = nil, cfg.DialTLS
	}
	var pp, sp http.Protocols
	sp.SetHTTP1(true)
	if cfg.HTTP1 {
		pp.SetHTTP1(true)
	} else {
		pp.SetUnencryptedHTTP2(true)
		sp.SetHTTP2(true)
	}
	plain.Protocols, secure.Protocols = &pp, &sp
	return &Transport{plain: plain, secure: secure}
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Scheme == "https" {
		return t.secure.RoundTrip(r)
	}
	return t.plain.RoundTrip(r)
}

// CloseIdleConnections closes both schemes' idle connections, as
// http.Client.CloseIdleConnections asks.
func (t *Transport) CloseIdleConnections() {
	t.plain.CloseIdleConnections()
	t.secure.CloseIdleConnections()
}

// NewClient returns an http.Client over New(Config{TLS: tlsConfig}), the
// client of calls between components. A nil tlsConfig trusts the
// system's roots.
func NewClient(tlsConfig *tls.Config) *http.Client {
	return &http.Client{Transport: New(Config{TLS: tlsConfig})}
}

// ServerProtocols returns the protocols a jobplane server serves on one
// plain port: HTTP/1.1, and unencrypted HTTP/2 for the prior knowledge of
// this package's clients.
func ServerProtocols() *http.Protocols {
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	return &p
}

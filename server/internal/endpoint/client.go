package endpoint

import (
	"crypto/tls"
	"net/http"

	"connectrpc.com/connect"

	"github.com/jobplane/jobplane/server/internal/telemetry"
)

// NewClient returns the HTTP client components use to call each other:
// for http:// URLs unencrypted HTTP/2 with prior knowledge, so that every
// call between two processes shares one connection; for https:// URLs (a
// process advertised behind a TLS-terminating proxy, see
// Config.Advertise) HTTP/2 or HTTP/1.1 as the proxy's TLS negotiation
// chooses, trusting the system's roots.
func NewClient() *http.Client { return NewTLSClient(nil) }

// NewTLSClient is NewClient with the TLS configuration tlsConfig for
// https:// URLs (an endpoint serving TLS, see Config.TLSCertFile, or a
// TLS-terminating proxy): HTTP/2 where the peer's ALPN offers it, else
// HTTP/1.1. A nil tlsConfig trusts the system's roots; ClientTLSConfig
// makes one that trusts other certificate authorities.
func NewTLSClient(tlsConfig *tls.Config) *http.Client {
	var plain, secure http.Protocols
	plain.SetUnencryptedHTTP2(true)
	secure.SetHTTP1(true)
	secure.SetHTTP2(true)
	return &http.Client{Transport: &schemeTransport{
		plain:  &http.Transport{Protocols: &plain},
		secure: &http.Transport{Protocols: &secure, TLSClientConfig: tlsConfig.Clone()},
	}}
}

// schemeTransport sends https:// requests on one transport and the others
// on another: one transport cannot do both, since with HTTP/1 enabled (as
// TLS proxies may need) it would use HTTP/1 for http:// URLs too.
type schemeTransport struct {
	plain, secure *http.Transport
}

// RoundTrip implements http.RoundTripper.
func (t *schemeTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Scheme == "https" {
		return t.secure.RoundTrip(r)
	}
	return t.plain.RoundTrip(r)
}

// CloseIdleConnections closes both transports' idle connections, as
// http.Client.CloseIdleConnections asks.
func (t *schemeTransport) CloseIdleConnections() {
	t.plain.CloseIdleConnections()
	t.secure.CloseIdleConnections()
}

// ServerProtocols returns the protocols an endpoint serves on one port:
// HTTP/1.1, and unencrypted HTTP/2 for NewClient's prior knowledge.
func ServerProtocols() *http.Protocols {
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	return &p
}

// ClientOptions returns the connect options of every client that
// components build to call each other, over NewClient: messages under
// CompressMinBytes are never compressed, and every call is traced and
// measured (telemetry.RPC), carrying the caller's trace context.
//
// Requests are sent uncompressed, as connect does by default: between
// components the CPU that gzip costs is dearer than the bytes it saves. The
// threshold holds should a caller add connect.WithSendGzip. Answers are
// compressed by the handler that sends them, above the same threshold (see
// Endpoint.Mount); these clients accept gzip, as connect clients do.
func ClientOptions() []connect.ClientOption {
	return []connect.ClientOption{connect.WithCompressMinBytes(CompressMinBytes), connect.WithInterceptors(telemetry.RPC())}
}

package runner

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
	"github.com/jobplane/jobplane/sdk/wire/transport"
)

// Protocols are the RPC protocols the runner can speak to the server
// under test (Config.Protocol): the Connect protocol, gRPC and gRPC-Web.
var Protocols = []string{"connect", "grpc", "grpcweb"}

// wire is how the runner talks to the server under test: the protocol
// of every client it makes, and whether the server serves TLS.
type wire struct {
	// protocol is one of Protocols.
	protocol string
	// rootCAs, if set, are the authorities the server's certificate
	// chains to: the server serves TLS, and its URLs are https://.
	rootCAs *x509.CertPool
}

// CheckWire reports whether Run would take protocol and the TLS
// authorities in caFile (Config.Protocol and Config.TLSCA): an unknown
// protocol, or a file that cannot be read or holds no PEM certificate,
// is an error.
func CheckWire(protocol, caFile string) error {
	_, err := newWire(protocol, caFile)
	return err
}

// newWire checks protocol ("" is connect) and reads the PEM authorities
// in caFile ("" for a server without TLS).
func newWire(protocol, caFile string) (wire, error) {
	w := wire{protocol: protocol}
	if w.protocol == "" {
		w.protocol = "connect"
	}
	if !slices.Contains(Protocols, w.protocol) {
		return w, fmt.Errorf("protocol %q: expected one of %s", protocol, strings.Join(Protocols, ", "))
	}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return w, fmt.Errorf("the TLS authorities: %w", err)
		}
		w.rootCAs = x509.NewCertPool()
		if !w.rootCAs.AppendCertsFromPEM(pem) {
			return w, fmt.Errorf("the TLS authorities: %s holds no PEM certificate", caFile)
		}
	}
	return w, nil
}

// options are the client options that select the protocol.
func (w wire) options() []connect.ClientOption {
	switch w.protocol {
	case "grpc":
		return []connect.ClientOption{connect.WithGRPC()}
	case "grpcweb":
		return []connect.ClientOption{connect.WithGRPCWeb()}
	}
	return nil
}

// scheme is the scheme of the server's URLs: https with TLS, else http.
func (w wire) scheme() string {
	if w.rootCAs != nil {
		return "https"
	}
	return "http"
}

// httpServer serves h on a loopback port over HTTP/1.1 and h2c, the way
// every jobplane component does.
type httpServer struct {
	srv  *http.Server
	ln   net.Listener
	done chan struct{}
}

func serve(addr string, h http.Handler) (*httpServer, error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	s := &httpServer{srv: &http.Server{Handler: h, Protocols: p, ReadHeaderTimeout: 10 * time.Second}, ln: ln, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			_ = err // the listener closed under us; Close reports nothing more
		}
	}()
	return s, nil
}

// URL returns the server's base URL.
func (s *httpServer) URL() string { return "http://" + s.ln.Addr().String() }

// Close stops the server, cutting off open streams.
func (s *httpServer) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		_ = s.srv.Close()
	}
	<-s.done
}

// newHTTPClient returns a client of jobplane's one transport: unencrypted
// HTTP/2 with prior knowledge to http:// URLs, and TLS (HTTP/2 or
// HTTP/1.1 by ALPN) to https:// URLs whose certificate chains to rootCAs
// (nil: the system's authorities). It carries Connect, gRPC and gRPC-Web
// alike.
func newHTTPClient(token string, rootCAs *x509.CertPool) *http.Client {
	var rt http.RoundTripper = transport.New(transport.Config{TLS: &tls.Config{RootCAs: rootCAs, MinVersion: tls.VersionTLS12}})
	if token != "" {
		rt = bearer{base: rt, token: token}
	}
	return &http.Client{Transport: rt}
}

// bearer sends a bearer token with every call to DispatcherService, the
// public API, and with no other call.
type bearer struct {
	base  http.RoundTripper
	token string
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	if !strings.HasPrefix(r.URL.Path, "/"+jobplanev1connect.DispatcherServiceName+"/") {
		return b.base.RoundTrip(r)
	}
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(r)
}

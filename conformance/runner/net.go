package runner

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
)

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

// newHTTPClient returns a client speaking unencrypted HTTP/2 with prior
// knowledge, for Connect and gRPC alike.
func newHTTPClient(token string) *http.Client {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	var rt http.RoundTripper = &http.Transport{Protocols: p}
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

package bench

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"
)

// compressMinBytes is the size under which the bench's handlers send
// answers uncompressed, as the jobplane endpoint's do (1 KiB).
const compressMinBytes = 1 << 10

// Server is a loopback HTTP server speaking HTTP/1.1 and h2c, as the
// jobplane endpoint does, for the handlers the bench hosts (its
// TaskExecutors and the floor). The server's own endpoint package is
// internal to server/, so the bench carries this small equivalent.
type Server struct {
	ln  net.Listener
	mux *http.ServeMux
}

// Listen opens a server on a free loopback port.
func Listen() (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	return &Server{ln: ln, mux: http.NewServeMux()}, nil
}

// URL returns the server's base URL.
func (s *Server) URL() string { return "http://" + s.ln.Addr().String() }

// Handle serves h under path (as the generated handlers return them).
func (s *Server) Handle(path string, h http.Handler) { s.mux.Handle(path, h) }

// Close releases the listener of a server that was never run.
func (s *Server) Close() error { return s.ln.Close() }

// Run serves until ctx is done, then shuts down, cutting requests still
// running after a second (streams never end on their own).
func (s *Server) Run(ctx context.Context) error {
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: s.mux, Protocols: &protos, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(s.ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

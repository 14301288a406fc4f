package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// debugFlags configure the debug listener of a server process: Go's
// profiler (net/http/pprof), off by default.
//
// The profiler exposes the process's memory and command line and lets a
// caller spend its CPU, so it is served only on a loopback address, on a
// listener of its own, never on the RPC endpoint: the rule is that simple,
// with no override. Reach it from elsewhere through an SSH tunnel or
// kubectl port-forward.
type debugFlags struct {
	listen string
}

func (d *debugFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&d.listen, "debug-listen", "", "serve Go's profiler (net/http/pprof, under /debug/pprof/) on this loopback address, such as 127.0.0.1:6060 (the host must be localhost, 127.x.x.x or ::1; port 0 picks a free port); off when empty")
}

// validate refuses a -debug-listen address that is not on loopback.
func (d *debugFlags) validate() error {
	if d.listen == "" {
		return nil
	}
	host, _, err := net.SplitHostPort(d.listen)
	if err != nil {
		return fmt.Errorf("-debug-listen %q: %w", d.listen, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("-debug-listen %q: the profiler is served only on loopback (localhost, 127.x.x.x or ::1)", d.listen)
	}
	return nil
}

// open opens the debug listener the flags describe, or returns nil when
// it is off. shutdownTimeout bounds how long profiles still running get
// once the process stops.
func (d *debugFlags) open(log *slog.Logger, shutdownTimeout time.Duration) (*debugServer, error) {
	if d.listen == "" {
		return nil, nil
	}
	if err := d.validate(); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", d.listen)
	if err != nil {
		return nil, fmt.Errorf("debug listener: %w", err)
	}
	// "localhost" is whatever the resolver says: hold the rule to the
	// address actually bound.
	if addr, ok := ln.Addr().(*net.TCPAddr); !ok || !addr.IP.IsLoopback() {
		ln.Close()
		return nil, fmt.Errorf("-debug-listen %q: bound %v, not a loopback address", d.listen, ln.Addr())
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return &debugServer{
		ln:  ln,
		log: log,
		srv: &http.Server{
			Handler:           mux,
			ReadHeaderTimeout: 10 * time.Second,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		},
		shutdownTimeout: shutdownTimeout,
	}, nil
}

// debugServer serves the profiler on its own listener.
type debugServer struct {
	ln              net.Listener
	srv             *http.Server
	log             *slog.Logger
	shutdownTimeout time.Duration
}

// Run serves until ctx is done, then shuts down: the listener closes at
// once, and profiles still being taken get up to the shutdown timeout
// before their connections are cut. It returns nil after a shutdown caused
// by ctx, or the error that stopped serving.
func (s *debugServer) Run(ctx context.Context) error {
	served := make(chan error, 1)
	go func() { served <- s.srv.Serve(s.ln) }()
	s.log.Info("serving the profiler", "addr", s.ln.Addr().String(), "path", "/debug/pprof/")
	select {
	case err := <-served:
		return fmt.Errorf("debug listener: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.shutdownTimeout)
	defer cancel()
	if err := s.srv.Shutdown(shutdownCtx); errors.Is(err, context.DeadlineExceeded) {
		s.srv.Close()
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("debug listener: %w", err)
	}
	return nil
}

// close releases the listener of a server whose Run was never called.
func (s *debugServer) close() { s.ln.Close() }

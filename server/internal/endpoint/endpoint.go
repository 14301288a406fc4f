package endpoint

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
	"github.com/jobplane/jobplane/sdk/wire/transport"
	"github.com/jobplane/jobplane/server/internal/atomicfile"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// DefaultMaxRequestBytes is the default of Config.MaxRequestBytes: 4 MiB.
// The largest request a cluster normally sees is a SubmitJob carrying a
// plan at the HA store's default limit of 1 MiB encoded in binary; the same
// graph in JSON is larger, so the default leaves room for it.
const DefaultMaxRequestBytes = 4 << 20

// DefaultMaxResponseBytes is the default of Config.MaxResponseBytes:
// 16 MiB. Answers that can grow with the cluster are paged (ListJobs, the
// subtasks of GetJob's full view) well below it.
const DefaultMaxResponseBytes = 16 << 20

// Config configures an Endpoint.
type Config struct {
	// Listen is the TCP address to listen on, for example "127.0.0.1:8080".
	// Port 0 picks a free port; Addr reports it. An unspecified host
	// (such as "0.0.0.0:8080", "[::]:8080" or ":8080", every interface)
	// needs Advertise, since no one can reach the process at it. Required.
	Listen string
	// Advertise is the base URL at which other processes and clients reach
	// the endpoint, as URL reports it and the process publishes it (its
	// leader record, its JobMasters' and TaskExecutors' addresses, the
	// leader named in NOT_LEADER answers): "http://" or "https://", a host
	// and a port, nothing else (no path, query or user), such as
	// "http://host1:8080". Set it when others reach the process under
	// another name or port than it binds (every interface, a proxy, NAT, a
	// container). With TLS it must be "https://". Default: "http://" (or
	// "https://" with TLS) and the bound address.
	Advertise string
	// TLSCertFile and TLSKeyFile, when set (both or neither), name the PEM
	// certificate (chain) and private key of the endpoint: it then serves
	// TLS only, HTTP/2 or HTTP/1.1 as the client's ALPN chooses, and its
	// URL is "https://". Listen reads them and fails on a missing or bad
	// file. Default: none, HTTP/1.1 and h2c in the clear.
	TLSCertFile, TLSKeyFile string
	// ClientCAFile, when set (with TLSCertFile), names the PEM certificate
	// authorities that sign the cluster's client certificates (mutual
	// TLS): every handshake asks for a client certificate and fails if the
	// client presents one that they did not sign, and every mounted
	// service not named in PublicServices answers a call without a
	// verified client certificate UNAUTHENTICATED. Health, reflection and
	// what Handle serves stay open to any TLS client. Default: none, no
	// client certificates.
	ClientCAFile string
	// PublicServices names the mounted services (fully qualified) that
	// answer without a client certificate when ClientCAFile is set: the
	// public API, such as jobplane.v1.DispatcherService. Default: none.
	PublicServices []string
	// AddrFile, when set, names a file into which the bound address is
	// written once the listener is open, so that a parent process or script
	// can find a port picked with port 0. Default: none.
	AddrFile string
	// ShutdownTimeout bounds the graceful shutdown: requests still running
	// after it (such as long-lived streams) are cut. Default: 5s.
	ShutdownTimeout time.Duration
	// ReadHeaderTimeout bounds how long a client may take to send request
	// headers. Default: 10s.
	ReadHeaderTimeout time.Duration
	// MaxRequestBytes bounds every request the endpoint serves: both the
	// request body on the wire (the whole body, compressed or not, and for
	// a stream all its messages) and each message once decompressed. A
	// request over it is answered RESOURCE_EXHAUSTED in the client's
	// protocol, without reading a body whose declared length is over it,
	// and without reading more than the limit of one that declares none.
	// Default: DefaultMaxRequestBytes.
	MaxRequestBytes int64
	// MaxResponseBytes bounds every response message the endpoint's
	// handlers send; one over it fails with RESOURCE_EXHAUSTED instead.
	// Default: DefaultMaxResponseBytes.
	MaxResponseBytes int64
}

// Validate reports whether the configuration can be used. It reads the
// TLS certificate and key, if named, and fails on half a pair, an
// unreadable or bad file, or a key that does not match its certificate.
func (c Config) Validate() error {
	if c.Listen == "" {
		return errors.New("endpoint: listen address is required")
	}
	host, _, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return fmt.Errorf("endpoint: listen address %q: %w", c.Listen, err)
	}
	if c.Advertise != "" {
		u, err := ParseAdvertise(c.Advertise)
		if err != nil {
			return err
		}
		if c.TLSCertFile != "" && !strings.HasPrefix(u, "https://") {
			return fmt.Errorf("endpoint: advertised URL %q must start with https:// when the endpoint serves TLS", c.Advertise)
		}
	} else if unspecified(host) {
		return fmt.Errorf("%w: listening on %q", ErrAdvertiseRequired, c.Listen)
	}
	if c.ShutdownTimeout < 0 || c.ReadHeaderTimeout < 0 {
		return errors.New("endpoint: timeouts must not be negative")
	}
	if c.MaxRequestBytes < 0 || c.MaxRequestBytes > math.MaxInt32 {
		return fmt.Errorf("endpoint: request limit %d is out of range (0 for the default, at most %d)", c.MaxRequestBytes, math.MaxInt32)
	}
	if c.MaxResponseBytes < 0 || c.MaxResponseBytes > math.MaxInt32 {
		return fmt.Errorf("endpoint: response limit %d is out of range (0 for the default, at most %d)", c.MaxResponseBytes, math.MaxInt32)
	}
	if _, err := c.loadCertificate(); err != nil {
		return err
	}
	if c.ClientCAFile != "" {
		if c.TLSCertFile == "" {
			return errors.New("endpoint: client certificates (a client CA file) need TLS: a certificate and key")
		}
		if _, err := loadPool(c.ClientCAFile); err != nil {
			return err
		}
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = 5 * time.Second
	}
	if c.ReadHeaderTimeout == 0 {
		c.ReadHeaderTimeout = 10 * time.Second
	}
	if c.MaxRequestBytes == 0 {
		c.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if c.MaxResponseBytes == 0 {
		c.MaxResponseBytes = DefaultMaxResponseBytes
	}
	return c
}

// Endpoint is one listener serving the RPC services mounted on it.
type Endpoint struct {
	cfg      Config
	log      *slog.Logger
	listener net.Listener
	url      string
	mux      *http.ServeMux
	health   *grpchealth.StaticChecker
	cert     *reloading[*tls.Certificate] // nil without TLS
	caPool   *reloading[*x509.CertPool]   // nil without client certificates

	mu       sync.Mutex
	cluster  *Endpoint // see SetCluster; nil: one surface
	services []string
	running  bool
	stopping bool // health is NOT_SERVING for good

	// streams ends when the shutdown begins, and with it the contract's
	// long-lived streams (see endStreams).
	streams    context.Context
	endStreams context.CancelFunc
	// active counts the requests being served.
	active atomic.Int64
}

// Listen opens the listener described by cfg. Nothing is served until Run.
// It fails if the configuration is invalid, the TLS files cannot be read,
// or the address cannot be bound.
func Listen(cfg Config, log *slog.Logger) (*Endpoint, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	cert, err := newKeyPair(cfg.TLSCertFile, cfg.TLSKeyFile, log)
	if err != nil {
		return nil, err
	}
	caPool, err := newPool(cfg.ClientCAFile, log)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("endpoint: %w", err)
	}
	if cfg.AddrFile != "" {
		if err := atomicfile.Write(cfg.AddrFile, []byte(ln.Addr().String()+"\n"), 0o644); err != nil {
			ln.Close()
			return nil, fmt.Errorf("endpoint: write address file: %w", err)
		}
	}
	url := "http://" + ln.Addr().String()
	if cert != nil {
		url = "https://" + ln.Addr().String()
	}
	if cfg.Advertise != "" {
		url, _ = ParseAdvertise(cfg.Advertise) // checked by Validate
	}
	streams, endStreams := context.WithCancel(context.Background())
	return &Endpoint{
		cfg:        cfg,
		log:        log,
		listener:   ln,
		url:        url,
		mux:        http.NewServeMux(),
		health:     grpchealth.NewStaticChecker(),
		cert:       cert,
		caPool:     caPool,
		streams:    streams,
		endStreams: endStreams,
	}, nil
}

// Addr returns the bound address, such as "127.0.0.1:41235".
func (e *Endpoint) Addr() net.Addr { return e.listener.Addr() }

// URL returns the base URL at which others reach the endpoint, the one
// its process publishes: Config.Advertise, or else "http://" ("https://"
// with TLS) and the bound address, such as "http://127.0.0.1:41235".
func (e *Endpoint) URL() string { return e.url }

// MaxRequestBytes is the largest request the endpoint reads.
func (e *Endpoint) MaxRequestBytes() int64 { return e.cfg.MaxRequestBytes }

// MaxResponseBytes is the largest answer the endpoint sends.
func (e *Endpoint) MaxResponseBytes() int64 { return e.cfg.MaxResponseBytes }

// Mount serves the named protobuf service (its fully qualified name, as the
// generated `...ServiceName` constant gives it) with the handler that
// newHandler builds, under the path it returns. newHandler has the shape
// of the components' Handler and Path methods: Mount calls it with the
// endpoint's handler options (the limits of Config.MaxRequestBytes and
// Config.MaxResponseBytes, and no compression under CompressMinBytes), so
// every service gets them, and a component adds its own after them.
//
// The service is reported SERVING by gRPC health (until SetServing says
// otherwise) and listed by reflection. Mount panics if called after Run has started, since the set of services
// is fixed from then on.
func (e *Endpoint) Mount(service string, newHandler func(opts ...connect.HandlerOption) (string, http.Handler)) {
	if r := e.routed(service); r != e {
		r.Mount(service, newHandler)
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.running {
		panic("endpoint: Mount after Run")
	}
	path, handler := newHandler(e.handlerOptions()...)
	e.mux.Handle(path, handler)
	e.services = append(e.services, service)
	e.health.SetStatus(service, grpchealth.StatusServing)
}

// SetServing sets the gRPC health status of a mounted service: SERVING
// or NOT_SERVING. A component calls it when it starts or stops answering
// (a leader-only service when the process gains or loses the
// leadership), before Run or while it serves. Once Run began shutting
// down, every service stays NOT_SERVING and SetServing does nothing.
func (e *Endpoint) SetServing(service string, serving bool) {
	if r := e.routed(service); r != e {
		r.SetServing(service, serving)
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopping {
		return
	}
	status := grpchealth.StatusNotServing
	if serving {
		status = grpchealth.StatusServing
	}
	e.health.SetStatus(service, status)
}

// Handle serves a plain HTTP handler, such as the metrics at
// "GET /metrics", under pattern (an http.ServeMux pattern) beside the RPC
// services. It panics if called after Run has started.
func (e *Endpoint) Handle(pattern string, handler http.Handler) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.running {
		panic("endpoint: Handle after Run")
	}
	e.mux.Handle(pattern, handler)
}

// Run serves until ctx is done, then shuts down gracefully: health turns
// NOT_SERVING, the listener closes, and requests in flight get up to
// Config.ShutdownTimeout to finish. It returns nil after a shutdown caused
// by ctx, or the error that stopped serving. With a cluster endpoint (see
// SetCluster) it serves both, and stops both when either fails.
func (e *Endpoint) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cluster := e.runCluster(ctx)
	if cluster == nil {
		return e.run(ctx)
	}
	public := make(chan error, 1)
	go func() { public <- e.run(ctx) }()
	select {
	case err := <-public:
		cancel()
		return errors.Join(err, <-cluster)
	case err := <-cluster:
		cancel()
		return errors.Join(err, <-public)
	}
}

func (e *Endpoint) run(ctx context.Context) error {
	e.mu.Lock()
	e.running = true
	services := append([]string(nil), e.services...)
	e.mu.Unlock()

	reflector := grpcreflect.NewStaticReflector(append(services,
		grpchealth.HealthV1ServiceName,
		grpcreflect.ReflectV1ServiceName,
		grpcreflect.ReflectV1AlphaServiceName,
	)...)
	e.mux.Handle(grpchealth.NewHandler(e.health, e.handlerOptions()...))
	e.mux.Handle(grpcreflect.NewHandlerV1(reflector, e.handlerOptions()...))
	e.mux.Handle(grpcreflect.NewHandlerV1Alpha(reflector, e.handlerOptions()...))

	srv := &http.Server{
		Handler:           e.endingStreams(limitBody(e.cfg.MaxRequestBytes, e.requireClientCert(services, e.mux))),
		Protocols:         transport.ServerProtocols(),
		ReadHeaderTimeout: e.cfg.ReadHeaderTimeout,
		ErrorLog:          slog.NewLogLogger(e.log.Handler(), slog.LevelWarn),
	}
	if e.cert != nil {
		srv.Protocols, srv.TLSConfig = tlsProtocols(), serverTLS(e.cert, e.caPool)
	}

	served := make(chan error, 1)
	go func() {
		if e.cert != nil {
			served <- srv.ServeTLS(e.listener, "", "")
			return
		}
		served <- srv.Serve(e.listener)
	}()
	e.log.Info("serving", "addr", e.listener.Addr().String(), "url", e.url, "services", services)

	select {
	case err := <-served:
		return fmt.Errorf("endpoint: serve: %w", err)
	case <-ctx.Done():
	}

	e.endStreams()
	e.mu.Lock()
	e.stopping = true
	e.health.SetStatus("", grpchealth.StatusNotServing)
	for _, s := range services {
		e.health.SetStatus(s, grpchealth.StatusNotServing)
	}
	e.mu.Unlock()
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.ShutdownTimeout)
	defer cancel()
	// Shutdown waits for idle HTTP/2 connections to close after its
	// GOAWAY, a second per connection that a client keeps open (a
	// worker's): once no request has run for two polls, nothing is left
	// to finish, and the connections are closed.
	quiet := make(chan struct{})
	defer close(quiet)
	go func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for idle := 0; idle < 2; {
			select {
			case <-quiet:
				return
			case <-shutdownCtx.Done():
				return
			case <-tick.C:
			}
			if e.active.Load() == 0 {
				idle++
			} else {
				idle = 0
			}
		}
		_ = srv.Close()
	}()
	err := srv.Shutdown(shutdownCtx)
	if errors.Is(err, context.DeadlineExceeded) {
		e.log.Warn("shutdown timed out; closing remaining connections", "timeout", e.cfg.ShutdownTimeout)
		err = srv.Close()
	}
	if serveErr := <-served; !errors.Is(serveErr, http.ErrServerClosed) {
		return fmt.Errorf("endpoint: serve: %w", serveErr)
	}
	if err != nil {
		return fmt.Errorf("endpoint: shutdown: %w", err)
	}
	e.log.Info("stopped", "addr", e.listener.Addr().String())
	return nil
}

// Close releases the listener of an endpoint whose Run was never called.
func (e *Endpoint) Close() error {
	e.endStreams()
	return errors.Join(e.listener.Close(), e.closeCluster())
}

// streamingProcedures are the contract's server-streaming procedures
// (WatchJob, ObserveLeader, WatchSession, ...), from the descriptors the
// binary registered.
var streamingProcedures = sync.OnceValue(func() map[string]bool {
	out := map[string]bool{}
	protoregistry.GlobalFiles.RangeFiles(func(f protoreflect.FileDescriptor) bool {
		if !strings.HasPrefix(string(f.Package()), "jobplane.") {
			return true
		}
		for i := range f.Services().Len() {
			svc := f.Services().Get(i)
			for j := range svc.Methods().Len() {
				if m := svc.Methods().Get(j); m.IsStreamingServer() {
					out["/"+string(svc.FullName())+"/"+string(m.Name())] = true
				}
			}
		}
		return true
	})
	return out
})

// endingStreams ends the contract's long-lived streams once the shutdown
// begins: the graceful shutdown waits for every request, and a stream a
// client keeps open (a worker following the leader, a client watching a
// job) would hold it for the whole ShutdownTimeout. Their clients
// reconnect elsewhere, as after any broken stream. Unary calls in flight
// finish as before.
func (e *Endpoint) endingStreams(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.active.Add(1)
		defer e.active.Add(-1)
		if !streamingProcedures()[r.URL.Path] {
			h.ServeHTTP(w, r)
			return
		}
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		defer context.AfterFunc(e.streams, cancel)()
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

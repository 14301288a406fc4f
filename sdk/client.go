package sdk

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
	"github.com/jobplane/jobplane/sdk/wire/transport"
)

// Protocol is the RPC protocol a Client speaks. Every jobplane server
// serves all three on one port.
type Protocol int

const (
	// ProtocolConnect is the Connect protocol, over HTTP/1.1 or HTTP/2.
	// The default.
	ProtocolConnect Protocol = iota
	// ProtocolGRPC is gRPC; it needs HTTP/2 (h2c for http:// URLs).
	ProtocolGRPC
	// ProtocolGRPCWeb is gRPC-Web, over HTTP/1.1 or HTTP/2.
	ProtocolGRPCWeb
)

// String returns the protocol's name.
func (p Protocol) String() string {
	switch p {
	case ProtocolConnect:
		return "connect"
	case ProtocolGRPC:
		return "grpc"
	case ProtocolGRPCWeb:
		return "grpcweb"
	}
	return fmt.Sprintf("Protocol(%d)", int(p))
}

// RetryPolicy says how a Client retries a call that may be retried (see
// the package documentation). Zero fields take their defaults.
type RetryPolicy struct {
	// InitialBackoff is the pause before the first retry. Default: 100ms.
	InitialBackoff time.Duration
	// MaxBackoff bounds the pause, which doubles after each retry, with
	// jitter. Default: 2s.
	MaxBackoff time.Duration
	// MaxElapsed bounds how long a call keeps retrying, from the first
	// failure since it last got an answer (a call, a stream's message);
	// the last error is returned then. A negative value turns retries
	// off: each of the Client's URLs is tried once, and a NOT_LEADER
	// answer that names the leader is followed, without pauses. Default:
	// 1 minute.
	MaxElapsed time.Duration
}

// DefaultRetryPolicy is the retry policy of a Client made without
// WithRetry.
var DefaultRetryPolicy = RetryPolicy{InitialBackoff: 100 * time.Millisecond, MaxBackoff: 2 * time.Second, MaxElapsed: time.Minute}

func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.InitialBackoff <= 0 {
		p.InitialBackoff = DefaultRetryPolicy.InitialBackoff
	}
	if p.MaxBackoff <= 0 {
		p.MaxBackoff = DefaultRetryPolicy.MaxBackoff
	}
	if p.MaxBackoff < p.InitialBackoff {
		p.MaxBackoff = p.InitialBackoff
	}
	if p.MaxElapsed == 0 {
		p.MaxElapsed = DefaultRetryPolicy.MaxElapsed
	}
	return p
}

// DefaultCallTimeout bounds each attempt of a unary call of a Client made
// without WithCallTimeout. It does not bound Wait, Watch or Execute, which
// take as long as the job does.
const DefaultCallTimeout = 30 * time.Second

// An Option configures a Client.
type Option func(*options)

type options struct {
	http1        bool
	protocol     Protocol
	tlsConfig    *tls.Config
	httpClient   connect.HTTPClient
	callTimeout  time.Duration
	retry        RetryPolicy
	interceptors []connect.Interceptor
	token        func(context.Context) (string, error) // WithToken, WithTokenFile
}

// WithHTTP1 makes the Client speak HTTP/1.1 (with TLS for https:// URLs).
// Default: HTTP/2 — h2c (prior knowledge) for http:// URLs; for https://
// URLs, HTTP/2 or HTTP/1.1 as ALPN settles it.
func WithHTTP1() Option { return func(o *options) { o.http1 = true } }

// WithProtocol sets the RPC protocol. Default: ProtocolConnect.
func WithProtocol(p Protocol) Option { return func(o *options) { o.protocol = p } }

// WithTLSConfig sets the TLS configuration for https:// URLs (a client
// certificate, the CAs to trust). Default: the system's roots.
func WithTLSConfig(cfg *tls.Config) Option { return func(o *options) { o.tlsConfig = cfg } }

// WithHTTPClient makes the Client send its requests through hc, which
// then decides the HTTP version and TLS; WithHTTP1 and WithTLSConfig are
// ignored. Default: a client built from those options.
func WithHTTPClient(hc connect.HTTPClient) Option { return func(o *options) { o.httpClient = hc } }

// WithCallTimeout bounds each attempt of a unary call; zero or negative
// means no bound. Default: DefaultCallTimeout.
func WithCallTimeout(d time.Duration) Option { return func(o *options) { o.callTimeout = d } }

// WithRetry sets the retry policy. Default: DefaultRetryPolicy.
func WithRetry(p RetryPolicy) Option { return func(o *options) { o.retry = p } }

// WithInterceptors adds connect interceptors to every call (for auth
// headers, logging or tracing), outermost first.
func WithInterceptors(i ...connect.Interceptor) Option {
	return func(o *options) { o.interceptors = append(o.interceptors, i...) }
}

// Client calls a jobplane cluster's public API. It is safe for concurrent
// use. Make one with New.
type Client struct {
	urls    []string
	opts    options
	hc      connect.HTTPClient
	closeFn func()

	mu      sync.Mutex
	leader  string // the URL believed to lead; "" when unknown
	next    int    // the index in urls of the next URL to try
	clients map[string]jobplanev1connect.DispatcherServiceClient
}

// New returns a Client of the cluster served at urls: the base URLs of
// one or more of its JobManagers (or standalone processes), such as
// "http://127.0.0.1:8080". Any of them may be a standby: the Client finds
// the leader.
func New(urls []string, opts ...Option) (*Client, error) {
	o := options{callTimeout: DefaultCallTimeout, retry: DefaultRetryPolicy}
	for _, opt := range opts {
		opt(&o)
	}
	o.retry = o.retry.withDefaults()
	var clean []string
	for _, u := range urls {
		for part := range strings.SplitSeq(u, ",") {
			part = strings.TrimSpace(part)
			if part == "" {
				continue
			}
			norm, err := normalizeURL(part)
			if err != nil {
				return nil, err
			}
			clean = append(clean, norm)
		}
	}
	if len(clean) == 0 {
		return nil, errors.New("sdk: no server URL given")
	}
	switch o.protocol {
	case ProtocolConnect, ProtocolGRPC, ProtocolGRPCWeb:
	default:
		return nil, fmt.Errorf("sdk: unknown protocol %v", o.protocol)
	}
	if o.protocol == ProtocolGRPC && o.http1 && o.httpClient == nil {
		return nil, errors.New("sdk: gRPC needs HTTP/2; drop WithHTTP1 or choose Connect or gRPC-Web")
	}
	if o.token != nil {
		// Outermost: the other interceptors see the call as it is sent.
		o.interceptors = append([]connect.Interceptor{tokenInterceptor{token: o.token}}, o.interceptors...)
	}
	c := &Client{urls: clean, opts: o, clients: map[string]jobplanev1connect.DispatcherServiceClient{}}
	if o.httpClient != nil {
		c.hc = o.httpClient
		c.closeFn = func() {}
	} else {
		// http:// over h2c (HTTP/1.1 with WithHTTP1), https:// over TLS
		// with HTTP/2 or HTTP/1.1 as ALPN settles it.
		t := transport.New(transport.Config{TLS: o.tlsConfig, HTTP1: o.http1, Proxy: http.ProxyFromEnvironment})
		c.hc = &http.Client{Transport: t}
		c.closeFn = t.CloseIdleConnections
	}
	return c, nil
}

// normalizeURL checks a server URL and drops a trailing slash.
func normalizeURL(s string) (string, error) {
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", fmt.Errorf("sdk: server URL %q: %w", s, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("sdk: server URL %q: the scheme must be http or https", s)
	}
	if u.Host == "" {
		return "", fmt.Errorf("sdk: server URL %q: no host", s)
	}
	return strings.TrimSuffix(u.String(), "/"), nil
}

// Close releases the Client's idle connections. Calls in flight are not
// interrupted; cancel their contexts for that.
func (c *Client) Close() { c.closeFn() }

// URLs returns the server URLs the Client was made with.
func (c *Client) URLs() []string { return append([]string(nil), c.urls...) }

// Leader returns the URL the Client sends its next call to as the
// leader's: the server that answered its last call, or the address a
// server named as the leader since; "" when it knows none.
func (c *Client) Leader() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leader
}

// Dispatcher returns the generated DispatcherService client for the
// server at url, with the Client's protocol, HTTP client and interceptors,
// for calls this package does not wrap. It neither follows the leader nor
// retries.
func (c *Client) Dispatcher(url string) jobplanev1connect.DispatcherServiceClient {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.clientLocked(url)
}

func (c *Client) clientLocked(url string) jobplanev1connect.DispatcherServiceClient {
	if d, ok := c.clients[url]; ok {
		return d
	}
	var copts []connect.ClientOption
	switch c.opts.protocol {
	case ProtocolGRPC:
		copts = append(copts, connect.WithGRPC())
	case ProtocolGRPCWeb:
		copts = append(copts, connect.WithGRPCWeb())
	}
	if len(c.opts.interceptors) > 0 {
		copts = append(copts, connect.WithInterceptors(c.opts.interceptors...))
	}
	d := jobplanev1connect.NewDispatcherServiceClient(c.hc, url, copts...)
	c.clients[url] = d
	return d
}

// target returns the URL to send the next attempt to.
func (c *Client) target() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.leader != "" {
		return c.leader
	}
	return c.urls[c.next%len(c.urls)]
}

// answered records that url answered as the leader.
func (c *Client) answered(url string) {
	c.mu.Lock()
	c.leader = url
	c.mu.Unlock()
}

// redirect records that the leader is at address.
func (c *Client) redirect(address string) {
	u, err := normalizeURL(address)
	if err != nil {
		return
	}
	c.mu.Lock()
	c.leader = u
	c.mu.Unlock()
}

// unreachable records that url did not answer as the leader: the next
// attempt goes to the next of the Client's URLs.
func (c *Client) unreachable(url string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.leader == url {
		c.leader = ""
	}
	for i, u := range c.urls {
		if u == url {
			c.next = i + 1
			return
		}
	}
	// An address a server named as the leader, unreachable from here
	// (advertised under a name this client cannot reach, or gone): the
	// next attempt goes to the next configured URL, not back to the one
	// that named it.
	c.next++
}

// attempt is one try of a call, against d.
type attempt[T any] func(ctx context.Context, d jobplanev1connect.DispatcherServiceClient) (T, error)

// call runs fn against the leader, following NOT_LEADER answers and
// retrying what may be retried, until it succeeds, fails for good, ctx
// ends or the retry policy gives up. bounded says whether each attempt
// gets the call timeout.
func call[T any](ctx context.Context, c *Client, bounded bool, fn attempt[T]) (T, error) {
	return callWith(ctx, c, c.retrier(), bounded, fn)
}

// callOnce is call for a call that is not idempotent, each attempt
// bounded: it is tried again only where the earlier attempt certainly did
// nothing (an answer of NOT_LEADER or one that asks for a delay, a
// connection that could not be made). An attempt whose outcome is unknown
// (no answer, a connection cut, the leader's own UNAVAILABLE) ends the
// call with its error.
func callOnce[T any](ctx context.Context, c *Client, fn attempt[T]) (T, error) {
	r := c.retrier()
	r.notIdempotent = true
	return callWith(ctx, c, r, true, fn)
}

func callWith[T any](ctx context.Context, c *Client, r *retrier, bounded bool, fn attempt[T]) (T, error) {
	for {
		url := c.target()
		actx, cancel := ctx, context.CancelFunc(func() {})
		if bounded && c.opts.callTimeout > 0 {
			actx, cancel = context.WithTimeout(ctx, c.opts.callTimeout)
		}
		res, err := fn(actx, c.Dispatcher(url))
		cancel()
		if err == nil {
			c.answered(url)
			return res, nil
		}
		if err := r.next(ctx, url, err); err != nil {
			var zero T
			return zero, err
		}
	}
}

// retrier decides, after each failed attempt of one call, whether and
// where the call is tried again.
type retrier struct {
	c         *Client
	b         *backoff
	redirects int
	// notIdempotent: an attempt that may have reached the server's
	// handler is not repeated (see callOnce).
	notIdempotent bool
}

func (c *Client) retrier() *retrier { return &retrier{c: c, b: c.backoff()} }

// progress says that the call got somewhere (a stream delivered a
// message): its retry budget starts again.
func (r *retrier) progress() {
	r.b = r.c.backoff()
	r.redirects = 0
}

// next takes the error of an attempt at url (nil: a stream that ended
// early) and returns nil when the call is to be tried again, after
// following the leader or a pause, or the error the call returns.
func (r *retrier) next(ctx context.Context, url string, err error) error {
	if ctx.Err() != nil {
		return contextError(ctx, err)
	}
	kind := retrySame
	if err != nil {
		kind = classify(err)
	}
	if r.notIdempotent && err != nil && (kind == retrySame || kind == retryOther) && !unsent(err) {
		return wrap(err)
	}
	switch kind {
	case retryNotLeader:
		var nl *NotLeaderError
		if errors.As(wrap(err), &nl) && nl.LeaderAddress != "" && r.redirects < len(r.c.urls)+2 {
			// Follow the named leader at once, a bounded number of times
			// in a row (two servers naming each other while an election
			// settles must not spin).
			r.redirects++
			r.c.redirect(nl.LeaderAddress)
			return nil
		}
		r.c.unreachable(url)
	case retryAfter:
		delay, _ := RetryDelay(err)
		if r.b.waitDelay(ctx, delay) {
			return nil
		}
		if ctx.Err() != nil {
			return contextError(ctx, err)
		}
		return wrap(err)
	case retrySame:
	case retryOther:
		r.c.unreachable(url)
	default:
		return wrap(err)
	}
	r.redirects = 0
	if r.b.wait(ctx) {
		return nil
	}
	if ctx.Err() != nil {
		return contextError(ctx, err)
	}
	if err == nil {
		return errors.New("sdk: the stream kept ending before its end")
	}
	return wrap(err)
}

// contextError is the error of a call whose ctx ended, naming the last
// answer it got.
func contextError(ctx context.Context, last error) error {
	if last == nil || errors.Is(last, ctx.Err()) {
		return ctx.Err()
	}
	return fmt.Errorf("%w (last answer: %w)", ctx.Err(), wrap(last))
}

// unsent reports whether err says that the request reached no server:
// the connection could not be made.
func unsent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

type retryKind int

const (
	retryNone retryKind = iota
	// retryNotLeader: the server does not lead; follow the leader.
	retryNotLeader
	// retrySame: the leader answered UNAVAILABLE for a reason of its own
	// (its store, a TaskExecutor): retry there after a pause.
	retrySame
	// retryOther: no answer; try the next server after a pause.
	retryOther
	// retryAfter: the server asked to retry after a delay (RetryInfo):
	// retry there after it.
	retryAfter
)

// classify says whether an attempt's error may be retried: UNAVAILABLE
// (which covers a connection that failed), a connection cut off, and an
// attempt that ran out of its own time. The caller's context is alive.
func classify(err error) retryKind {
	if Reason(err) == reasonNotLeader {
		return retryNotLeader
	}
	if isTLSMisconfiguration(err) {
		return retryNone // retrying cannot fix a certificate
	}
	switch connect.CodeOf(err) {
	case connect.CodeUnavailable:
		if Reason(err) != jobplanev1.ErrorReason_ERROR_REASON_UNSPECIFIED {
			return retrySame
		}
		return retryOther
	case connect.CodeDeadlineExceeded:
		return retryOther
	case connect.CodeResourceExhausted:
		// A limit that lifts with time (a submission rate) says when;
		// one that does not (too many streams, a cluster full of jobs)
		// does not, and is the caller's to handle.
		if _, ok := RetryDelay(err); ok {
			return retryAfter
		}
	case connect.CodeUnknown, connect.CodeInternal:
		// A jobplane server's own INTERNAL answer carries its reason. One
		// without is the transport's: a connection cut mid-answer (an I/O
		// error, a truncated message, an HTTP/2 connection closed under
		// a stream). Every call of the API may be repeated, so it is.
		var netErr net.Error
		if errors.As(err, &netErr) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
			Reason(err) == jobplanev1.ErrorReason_ERROR_REASON_UNSPECIFIED {
			return retryOther
		}
	case connect.CodeCanceled:
		// The attempt's own context was not canceled (the caller's is
		// alive): the server or a proxy canceled it.
		return retryOther
	}
	return retryNone
}

// backoff paces the retries of one call. Its budget (MaxElapsed) runs
// from the first failure since the call last got somewhere, not from the
// call's start: a watch or a wait that ran for an hour still rides out
// a failover.
type backoff struct {
	policy   RetryPolicy
	start    time.Time // the first failure; zero before
	next     time.Duration
	disabled bool
	tries    int // with retries off: the URLs tried
	urls     int
}

func (c *Client) backoff() *backoff {
	return &backoff{policy: c.opts.retry, next: c.opts.retry.InitialBackoff, disabled: c.opts.retry.MaxElapsed < 0, urls: len(c.urls)}
}

// wait sleeps before the next retry; it returns false when no retry
// should follow (the policy's time is up, or ctx ended). With retries
// off, it lets each of the Client's URLs be tried once, at once.
func (b *backoff) wait(ctx context.Context) bool {
	if b.disabled {
		b.tries++
		return b.tries < b.urls && ctx.Err() == nil
	}
	if b.start.IsZero() {
		b.start = time.Now()
	}
	remaining := b.policy.MaxElapsed - time.Since(b.start)
	if remaining <= 0 {
		return false
	}
	// Full jitter on the upper half: between d/2 and d.
	d := b.next/2 + rand.N(b.next/2+1)
	d = min(d, remaining)
	b.next = min(2*b.next, b.policy.MaxBackoff)
	return sleep(ctx, d)
}

// sleep waits d; it returns false if ctx ends first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// waitDelay waits delay, as the server asked, before the next retry; it
// returns false at once, without waiting, when retries are off or the
// wait would outlast ctx's deadline or the policy's MaxElapsed, and
// false when ctx ends while it waits.
func (b *backoff) waitDelay(ctx context.Context, delay time.Duration) bool {
	if b.disabled {
		return false
	}
	if b.start.IsZero() {
		b.start = time.Now()
	}
	if b.policy.MaxElapsed-time.Since(b.start) < delay {
		return false
	}
	if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < delay {
		return false
	}
	return sleep(ctx, delay)
}

// isTLSMisconfiguration reports whether err says that TLS cannot work
// with this server as configured: an untrusted or mismatched certificate,
// or a server that does not speak TLS.
func isTLSMisconfiguration(err error) bool {
	var verify *tls.CertificateVerificationError
	var unknownCA x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	var record tls.RecordHeaderError
	// A TLS alert from the server (a client certificate it refused, no
	// protocol in common) comes as a "remote error".
	var op *net.OpError
	alert := errors.As(err, &op) && op.Op == "remote error"
	return errors.As(err, &verify) || errors.As(err, &unknownCA) || errors.As(err, &hostname) ||
		errors.As(err, &invalid) || errors.As(err, &record) || alert
}

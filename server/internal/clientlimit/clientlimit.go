// Package clientlimit bounds what one client of the public API holds and
// does: the server streams it holds open at once, and the rate of its job
// submissions (a token bucket per client). It is a connect interceptor for
// the DispatcherService handler; it answers RESOURCE_EXHAUSTED with the
// contract's reasons (TOO_MANY_STREAMS, SUBMIT_RATE_EXCEEDED, the latter
// with a google.rpc.RetryInfo detail).
//
// A client is its authenticated principal (package principal) when
// authentication put one in the call's context, and otherwise the host of
// its network address. The state kept per client stays bounded without a
// timer or goroutine per client: a client's stream count is dropped when
// its last stream ends, and its token bucket once it has filled up again
// (a full bucket is what a client never seen before gets).
//
// It must not look at a request beyond its procedure: whatever a
// submission holds, it counts as one.
package clientlimit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/time/rate"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
	"github.com/jobplane/jobplane/server/internal/principal"
	"github.com/jobplane/jobplane/server/internal/telemetry"
)

// Defaults of the limits, as the jobplane command applies them (a zero
// Config field turns its limit off).
const (
	// DefaultMaxStreams is the server streams one client may hold open
	// at once: far more than a person or a program watching its jobs
	// needs, few enough that one client cannot tie up the server.
	DefaultMaxStreams = 1000
	// DefaultSubmitRate is the submissions per second one client may
	// make, sustained: about a tenth of what one HA-store writer
	// acknowledges, so that one client cannot take the store from the
	// others.
	DefaultSubmitRate = 100
	// DefaultSubmitBurst is the submissions one client may make at once
	// above DefaultSubmitRate: a script may submit this many jobs in a
	// row without waiting.
	DefaultSubmitBurst = 1000
)

// Config configures a Limiter.
type Config struct {
	// MaxStreams bounds the server streams (WatchJob and any other server
	// stream of the handler) one client holds open at once; a stream over
	// it is refused before it starts. Zero: no limit.
	MaxStreams int
	// SubmitRate is the submissions (SubmitJob calls, resubmissions of an
	// existing job included) per second one client may make, sustained;
	// SubmitBurst is how many it may make at once. A submission over them
	// is refused before it is looked at, with the delay after which it
	// would be accepted. Zero SubmitRate: no limit; SubmitBurst must then
	// be at least 1.
	SubmitRate  float64
	SubmitBurst int
	// Now is the clock of the token buckets. Default: time.Now.
	Now func() time.Time
}

// Validate reports whether the configuration can be used.
func (c Config) Validate() error {
	switch {
	case c.MaxStreams < 0:
		return errors.New("clientlimit: the stream limit must not be negative")
	case c.SubmitRate < 0:
		return errors.New("clientlimit: the submission rate must not be negative")
	case c.SubmitRate > 0 && c.SubmitBurst < 1:
		return errors.New("clientlimit: the submission burst must be at least 1")
	}
	return nil
}

// Limiter enforces a Config's limits per client. It is a
// connect.Interceptor for a DispatcherService handler; it leaves unary
// calls other than SubmitJob alone, and client-side calls too. Safe for
// concurrent use.
type Limiter struct {
	cfg Config

	mu      sync.Mutex
	streams map[string]int // open streams per client; no entry at zero
	buckets map[string]*rate.Limiter
	swept   time.Time // when buckets were last swept of full ones
	refill  time.Duration
}

var _ connect.Interceptor = (*Limiter)(nil)

// New returns a Limiter of cfg.
func New(cfg Config) (*Limiter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	l := &Limiter{cfg: cfg, streams: make(map[string]int), buckets: make(map[string]*rate.Limiter)}
	if cfg.SubmitRate > 0 {
		// A bucket fills up from empty in burst/rate; sweeping no more
		// often than that keeps the sweeps' cost, a pass over the
		// buckets, below one bucket's worth per submission.
		l.refill = time.Duration(float64(cfg.SubmitBurst) / cfg.SubmitRate * float64(time.Second))
	}
	return l, nil
}

// Client returns the identity that the limits of a call count against:
// the authenticated principal in ctx, or else the host of the peer's
// network address.
func Client(ctx context.Context, peer connect.Peer) string {
	if p, ok := principal.FromContext(ctx); ok {
		return "principal " + p.Name
	}
	host, _, err := net.SplitHostPort(peer.Addr)
	if err != nil {
		host = peer.Addr
	}
	return "address " + host
}

// Streams returns the streams the client holds open, as counted.
func (l *Limiter) Streams(client string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.streams[client]
}

// Buckets returns the clients whose token bucket is kept: those that
// submitted recently enough that their bucket has not filled up since
// (or was not swept yet).
func (l *Limiter) Buckets() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.buckets)
}

// WrapUnary limits the rate of SubmitJob calls per client.
func (l *Limiter) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	if l.cfg.SubmitRate == 0 {
		return next
	}
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient || req.Spec().Procedure != jobplanev1connect.DispatcherServiceSubmitJobProcedure {
			return next(ctx, req)
		}
		if delay, ok := l.submit(Client(ctx, req.Peer())); !ok {
			telemetry.LimitRefused(ctx, apierror.Reason(jobplanev1.ErrorReason_ERROR_REASON_SUBMIT_RATE_EXCEEDED))
			err := apierror.New(jobplanev1.ErrorReason_ERROR_REASON_SUBMIT_RATE_EXCEEDED,
				fmt.Sprintf("submission rate exceeded: a client may submit %s jobs per second, in bursts of up to %d; retry in %v",
					strconv.FormatFloat(l.cfg.SubmitRate, 'g', -1, 64), l.cfg.SubmitBurst, delay.Round(time.Millisecond)),
				map[string]string{"rate": strconv.FormatFloat(l.cfg.SubmitRate, 'g', -1, 64), "burst": strconv.Itoa(l.cfg.SubmitBurst)})
			return nil, apierror.RetryAfter(err, delay)
		}
		return next(ctx, req)
	}
}

// submit takes a token from the client's bucket; without one, it returns
// the delay after which the bucket holds one.
func (l *Limiter) submit(client string) (time.Duration, bool) {
	now := l.cfg.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweepLocked(now)
	b := l.buckets[client]
	if b == nil {
		b = rate.NewLimiter(rate.Limit(l.cfg.SubmitRate), l.cfg.SubmitBurst)
		l.buckets[client] = b
	}
	r := b.ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return d, false
	}
	return 0, true
}

// sweepLocked drops the buckets that are full again, at most once per
// refill time: such a bucket is the one a new client gets. l.mu must be
// held.
func (l *Limiter) sweepLocked(now time.Time) {
	if now.Sub(l.swept) < l.refill {
		return
	}
	l.swept = now
	for client, b := range l.buckets {
		if b.TokensAt(now) >= float64(l.cfg.SubmitBurst) {
			delete(l.buckets, client)
		}
	}
}

// WrapStreamingClient leaves client streams alone.
func (l *Limiter) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler bounds the streams a client holds open at once.
func (l *Limiter) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	if l.cfg.MaxStreams == 0 {
		return next
	}
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		client := Client(ctx, conn.Peer())
		if !l.openStream(client) {
			telemetry.LimitRefused(ctx, apierror.Reason(jobplanev1.ErrorReason_ERROR_REASON_TOO_MANY_STREAMS))
			return apierror.New(jobplanev1.ErrorReason_ERROR_REASON_TOO_MANY_STREAMS,
				fmt.Sprintf("too many streams: a client may hold %d streams open at once (this one is %s); close one, then retry", l.cfg.MaxStreams, client),
				map[string]string{"limit": strconv.Itoa(l.cfg.MaxStreams)})
		}
		defer l.closeStream(client)
		return next(ctx, conn)
	}
}

// openStream counts a new stream of client, unless it holds the most
// already.
func (l *Limiter) openStream(client string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.streams[client] >= l.cfg.MaxStreams {
		return false
	}
	l.streams[client]++
	return true
}

// closeStream counts a stream of client as ended.
func (l *Limiter) closeStream(client string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.streams[client]--; l.streams[client] <= 0 {
		delete(l.streams, client)
	}
}

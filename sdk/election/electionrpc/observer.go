package electionrpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"connectrpc.com/connect"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	"github.com/jobplane/jobplane/gen/jobplane/hastore/v1/hastorev1connect"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
)

// Retry pauses between attempts to (re)open a broken stream: the first
// pause is minRetry, doubling up to maxRetry while attempts keep failing.
const (
	minRetry = 50 * time.Millisecond
	maxRetry = time.Second
)

// Config configures an Observer.
type Config struct {
	// HTTPClient carries the calls; it must support HTTP/2 (or h2c) for
	// the gRPC protocol, and any protocol works over HTTP/1.1. Required.
	HTTPClient connect.HTTPClient
	// BaseURL is where HAStoreService is served (a standalone, jobmanager
	// or hastore process), such as "http://127.0.0.1:8080". It is the
	// first server tried, before BaseURLs.
	BaseURL string
	// BaseURLs are more servers of the same cluster's HAStoreService (any
	// of its jobmanager, standalone or hastore processes), tried in order
	// after BaseURL: the Observer follows the leader through one of them
	// and moves to the next when its stream breaks or cannot be opened.
	// BaseURL and BaseURLs together name at least one server; a URL named
	// twice is tried once.
	BaseURLs []string
	// Options are passed to the generated Connect clients.
	Options []connect.ClientOption
	// IdleTimeout, when positive, gives up a stream on which nothing (no
	// leader, no heartbeat) arrived for this long, as if it broke, and
	// moves to the next server: this detects a server that stopped
	// answering without closing its connections (paused, cut off). Set it
	// well above the servers' heartbeat interval. Default: 0, no limit.
	IdleTimeout time.Duration
	// Logger receives a warning when a stream cannot be opened or breaks
	// (once per distinct server and error until a stream works again).
	// Default: slog.Default().
	Logger *slog.Logger
}

// server is one HAStoreService the Observer can follow the leader through.
type server struct {
	url string
	rpc hastorev1connect.HAStoreServiceClient
}

// Observer is an election.Observer over HAStoreService, served by one or
// several processes of a cluster. It is safe for concurrent use; each
// ObserveLeader call has a stream of its own.
type Observer struct {
	servers []server
	idle    time.Duration
	log     *slog.Logger
}

var (
	_ election.Observer = (*Observer)(nil)
	_ election.Reader   = (*Observer)(nil)
)

// NewObserver returns an Observer that calls the HAStoreService at
// cfg.BaseURL and cfg.BaseURLs. It fails if the HTTP client is missing,
// no base URL is given, or one of them is empty.
func NewObserver(cfg Config) (*Observer, error) {
	if cfg.HTTPClient == nil {
		return nil, errors.New("electionrpc: HTTP client is required")
	}
	urls := cfg.BaseURLs
	if cfg.BaseURL != "" {
		urls = append([]string{cfg.BaseURL}, urls...)
	}
	if len(urls) == 0 {
		return nil, errors.New("electionrpc: base URL is required")
	}
	if cfg.IdleTimeout < 0 {
		return nil, errors.New("electionrpc: idle timeout must not be negative")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	o := &Observer{idle: cfg.IdleTimeout, log: cfg.Logger}
	seen := map[string]bool{}
	for _, u := range urls {
		if u == "" {
			return nil, errors.New("electionrpc: empty base URL")
		}
		if seen[u] {
			continue
		}
		seen[u] = true
		o.servers = append(o.servers, server{url: u, rpc: hastorev1connect.NewHAStoreServiceClient(cfg.HTTPClient, u, cfg.Options...)})
	}
	return o, nil
}

// errIdle ends a stream silent for longer than Config.IdleTimeout.
var errIdle = errors.New("electionrpc: nothing received within the idle timeout")

// ObserveLeader implements election.Observer. It follows the leader
// through the first server that answers: a stream that breaks, ends,
// cannot be opened or (with Config.IdleTimeout) stays silent too long is
// given up for the next server, at once while servers of this round are
// left untried, and after a pause once every server failed in a row (the
// pause grows from 50ms to 1s while rounds keep failing). After any
// reopening the leader is reported only if it differs from the last one
// reported, so fn sees every change it could observe, in order, and no
// repeats. It fails at once, without retrying, if a server refuses the
// election name (INVALID_ARGUMENT).
func (o *Observer) ObserveLeader(ctx context.Context, name string, fn func(election.Leader) error) error {
	var (
		last     election.Leader
		reported bool
		logged   = map[string]bool{} // server and error, since the last stream that worked
	)
	pause := minRetry
	failed := 0 // streams that failed in this round: since the last pause, or the last stream that worked a while
	for i := 0; ; i = (i + 1) % len(o.servers) {
		srv := o.servers[i]
		opened := time.Now()
		received, err := o.observe(ctx, srv, name, func(info election.Leader) error {
			if reported && info == last {
				return nil
			}
			last, reported = info, true
			return fn(info)
		})
		if received {
			pause = minRetry
			clear(logged)
			if time.Since(opened) > maxRetry {
				// A stream that worked a while starts a new round: when
				// it breaks, every server gets a try before any pause.
				// One that keeps breaking at once does not, lest a
				// flapping server be reopened in a busy loop.
				failed = 0
			}
		}
		var fnErr fnError
		if errors.As(err, &fnErr) {
			return fnErr.err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if connect.CodeOf(err) == connect.CodeInvalidArgument {
			return fmt.Errorf("electionrpc: observe %q: %w", name, err)
		}
		if err == nil {
			err = errors.New("stream ended")
		}
		if key := srv.url + "\x00" + err.Error(); !logged[key] {
			logged[key] = true
			o.log.Warn("observing the leader failed; trying again", "election", name, "server", srv.url, "err", err)
		}
		if failed++; failed < len(o.servers) {
			continue // a server of this round is left: try it at once
		}
		failed = 0
		timer := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		case <-timer.C:
			pause = min(2*pause, maxRetry)
		}
	}
}

// Leader implements election.Reader: one GetLeader call answered, by
// the first server that answers, the servers tried in order as
// ObserveLeader tries them (after a round where every one failed, a
// pause from 50ms doubling to 1s) until ctx ends. A server that does not
// serve GetLeader (UNIMPLEMENTED: a relay of an older release) is read
// with the first answer of an ObserveLeader stream instead. It fails at
// once, without trying the next, if a server refuses the election name
// (INVALID_ARGUMENT); once ctx ends, with the last server's error.
func (o *Observer) Leader(ctx context.Context, name string) (election.Leader, error) {
	pause := minRetry
	for {
		var err error
		for _, srv := range o.servers {
			var resp *hastorev1.GetLeaderResponse
			resp, err = srv.rpc.GetLeader(ctx, &hastorev1.GetLeaderRequest{Election: name})
			if connect.CodeOf(err) == connect.CodeUnimplemented {
				var first election.Leader
				_, err = o.observe(ctx, srv, name, func(l election.Leader) error {
					first = l
					return errFirstAnswer
				})
				if errors.As(err, new(fnError)) {
					return first, nil
				}
				if err == nil {
					err = errors.New("stream ended")
				}
			}
			switch {
			case err == nil:
				return leaderFromProto(resp.GetLeader()), nil
			case ctx.Err() != nil:
				return election.Leader{}, fmt.Errorf("electionrpc: leader of %q: %w", name, err)
			case connect.CodeOf(err) == connect.CodeInvalidArgument:
				return election.Leader{}, fmt.Errorf("electionrpc: leader of %q: %w", name, err)
			}
		}
		timer := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			timer.Stop()
			return election.Leader{}, fmt.Errorf("electionrpc: leader of %q: %w", name, err)
		case <-timer.C:
			pause = min(2*pause, maxRetry)
		}
	}
}

// errFirstAnswer ends a stream after its first answer (Leader, from a
// server without GetLeader).
var errFirstAnswer = errors.New("electionrpc: first answer taken")

// fnError carries the error of ObserveLeader's fn out of observe.
type fnError struct{ err error }

func (e fnError) Error() string { return e.err.Error() }

// observe follows the leader over one stream from srv until it breaks,
// ends or stays idle, calling report with each leader it carries.
// received tells whether the stream carried anything (a leader or a
// heartbeat), that is, whether it worked; an error of report comes back
// as an fnError.
func (o *Observer) observe(ctx context.Context, srv server, name string, report func(election.Leader) error) (received bool, err error) {
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var idle *time.Timer
	if o.idle > 0 {
		idle = time.AfterFunc(o.idle, func() { cancel(errIdle) })
		defer idle.Stop()
	}
	stream, err := srv.rpc.ObserveLeader(sctx, &hastorev1.ObserveLeaderRequest{Election: name})
	if err != nil {
		return false, causeOr(sctx, ctx, err)
	}
	defer stream.Close()
	for stream.Receive() {
		received = true
		if idle != nil {
			idle.Reset(o.idle)
		}
		msg := stream.Msg()
		if msg.GetLeader() == nil {
			continue // a heartbeat
		}
		if err := report(leaderFromProto(msg.GetLeader())); err != nil {
			return true, fnError{err}
		}
	}
	return received, causeOr(sctx, ctx, stream.Err())
}

// causeOr returns errIdle for a stream that the idle timer ended (while
// the caller's ctx is still live), and err otherwise.
func causeOr(sctx, ctx context.Context, err error) error {
	if ctx.Err() == nil && errors.Is(context.Cause(sctx), errIdle) {
		return errIdle
	}
	return err
}

func leaderFromProto(info *jobplanev1.LeaderInfo) election.Leader {
	return election.Leader{
		Election:       info.GetElection(),
		Address:        info.GetAddress(),
		ClusterAddress: info.GetClusterAddress(),
		Token:          election.Token{SessionID: info.GetToken().GetSessionId(), Epoch: info.GetToken().GetEpoch()},
	}
}

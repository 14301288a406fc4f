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
	"github.com/jobplane/jobplane/server/election"
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
	// or hastore process), such as "http://127.0.0.1:8080". Required.
	BaseURL string
	// Options are passed to the generated Connect client.
	Options []connect.ClientOption
	// Logger receives a warning when the stream cannot be opened or
	// breaks (once per distinct error in a row). Default: slog.Default().
	Logger *slog.Logger
}

// Observer is an election.Observer over HAStoreService. It is safe for
// concurrent use; each ObserveLeader call has a stream of its own.
type Observer struct {
	rpc hastorev1connect.HAStoreServiceClient
	log *slog.Logger
}

var _ election.Observer = (*Observer)(nil)

// NewObserver returns an Observer that calls the HAStoreService at
// cfg.BaseURL. It fails if the HTTP client or base URL is missing.
func NewObserver(cfg Config) (*Observer, error) {
	if cfg.HTTPClient == nil {
		return nil, errors.New("electionrpc: HTTP client is required")
	}
	if cfg.BaseURL == "" {
		return nil, errors.New("electionrpc: base URL is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Observer{
		rpc: hastorev1connect.NewHAStoreServiceClient(cfg.HTTPClient, cfg.BaseURL, cfg.Options...),
		log: cfg.Logger,
	}, nil
}

// ObserveLeader implements election.Observer. A stream that breaks or
// cannot be opened is reopened, after a pause that grows from 50ms to 1s
// while attempts keep failing; after a reopening, the leader is reported
// only if it differs from the last one reported, so fn sees every change
// it could observe, in order, and no repeats. It fails at once, without
// retrying, if the service refuses the election name (INVALID_ARGUMENT).
func (o *Observer) ObserveLeader(ctx context.Context, name string, fn func(election.Leader) error) error {
	var (
		last     election.Leader
		reported bool
		lastErr  string
	)
	pause := minRetry
	for {
		stream, err := o.rpc.ObserveLeader(ctx, &hastorev1.ObserveLeaderRequest{Election: name})
		if err == nil {
			for stream.Receive() {
				msg := stream.Msg()
				if msg.GetLeader() == nil {
					continue // a heartbeat
				}
				pause, lastErr = minRetry, ""
				info := leaderFromProto(msg.GetLeader())
				if reported && info == last {
					continue
				}
				last, reported = info, true
				if err := fn(info); err != nil {
					stream.Close()
					return err
				}
			}
			err = stream.Err()
			stream.Close()
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
		if msg := err.Error(); msg != lastErr {
			lastErr = msg
			o.log.Warn("observing the leader failed; retrying", "election", name, "err", err)
		}
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

func leaderFromProto(info *jobplanev1.LeaderInfo) election.Leader {
	return election.Leader{
		Election: info.GetElection(),
		Address:  info.GetAddress(),
		Token:    election.Token{SessionID: info.GetToken().GetSessionId(), Epoch: info.GetToken().GetEpoch()},
	}
}

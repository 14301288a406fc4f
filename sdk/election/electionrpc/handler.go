package electionrpc

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"connectrpc.com/connect"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	"github.com/jobplane/jobplane/gen/jobplane/hastore/v1/hastorev1connect"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
)

// DefaultHeartbeat is the default of HandlerConfig.Heartbeat, and the
// interval at which jobplane's servers send heartbeats on every idle
// HAStoreService stream, so that an Observer's Config.IdleTimeout of a few
// of them detects a server that stopped answering.
const DefaultHeartbeat = time.Second

// HandlerConfig configures a Handler.
type HandlerConfig struct {
	// Observer is where the leaders served come from: typically an
	// Observer following the cluster's HA store in another process.
	// Required.
	Observer election.Observer
	// Heartbeat is how long a stream may stay idle before the handler
	// sends a heartbeat. Default: DefaultHeartbeat.
	Heartbeat time.Duration
	// Logger receives the handler's logs. Default: slog.Default().
	Logger *slog.Logger
}

// Handler serves the leader-following part of HAStoreService
// (ObserveLeader, GetLeader) from an election.Observer, so that a process
// whose HA store lives in another process (a jobmanager on a hastore
// process) can still be asked for the leader, as any process of the
// cluster can. Every other RPC of the service answers UNIMPLEMENTED.
type Handler struct {
	hastorev1connect.UnimplementedHAStoreServiceHandler

	observer  election.Observer
	heartbeat time.Duration
	log       *slog.Logger
}

var _ hastorev1connect.HAStoreServiceHandler = (*Handler)(nil)

// NewHandler returns a Handler for cfg.Observer. It fails if the observer
// is missing or the heartbeat is negative.
func NewHandler(cfg HandlerConfig) (*Handler, error) {
	if cfg.Observer == nil {
		return nil, errors.New("electionrpc: observer is required")
	}
	if cfg.Heartbeat < 0 {
		return nil, errors.New("electionrpc: heartbeat must not be negative")
	}
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = DefaultHeartbeat
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Handler{observer: cfg.Observer, heartbeat: cfg.Heartbeat, log: cfg.Logger}, nil
}

// Path returns the URL path and HTTP handler of the service.
func (h *Handler) Path(opts ...connect.HandlerOption) (string, http.Handler) {
	return hastorev1connect.NewHAStoreServiceHandler(h, opts...)
}

// ObserveLeader implements HAStoreServiceHandler: it sends the election's
// leader and every change the observer reports, and a heartbeat whenever
// the stream was idle for HandlerConfig.Heartbeat. An election name that
// the observer's store refuses is answered with the store's
// INVALID_ARGUMENT; any other failure of the observer with UNAVAILABLE.
func (h *Handler) ObserveLeader(ctx context.Context, req *hastorev1.ObserveLeaderRequest, stream *connect.ServerStream[hastorev1.ObserveLeaderResponse]) error {
	return StreamLeader(ctx, h.observer, req.GetElection(), h.heartbeat, stream, h.toConnect)
}

// GetLeader implements HAStoreServiceHandler: one read of the observer
// where it is an election.Reader (an Observer and every store are), the
// first answer of its ObserveLeader otherwise; its errors are answered as
// ObserveLeader's are.
func (h *Handler) GetLeader(ctx context.Context, req *hastorev1.GetLeaderRequest) (*hastorev1.GetLeaderResponse, error) {
	l, err := election.ReadLeader(ctx, h.observer, req.GetElection())
	if err != nil {
		return nil, h.toConnect(err)
	}
	return &hastorev1.GetLeaderResponse{Leader: leaderToProto(l)}, nil
}

// StreamLeader serves one HAStoreService ObserveLeader stream from
// observer: it sends the election's leader and every change the observer
// reports, and a heartbeat whenever the stream was idle for heartbeat
// (which must be positive). It returns nil once ctx is done (the client
// went away), the error of stream.Send if a send fails, and mapErr of the
// observer's error if the observation ends otherwise; mapErr is where a
// handler turns the observer's errors into the Connect errors it answers
// with. Every handler of the service serves ObserveLeader with it.
func StreamLeader(ctx context.Context, observer election.Observer, name string, heartbeat time.Duration, stream *connect.ServerStream[hastorev1.ObserveLeaderResponse], mapErr func(error) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	changes := make(chan election.Leader)
	observed := make(chan error, 1)
	go func() {
		observed <- observer.ObserveLeader(ctx, name, func(l election.Leader) error {
			select {
			case changes <- l:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	}()
	ticker := time.NewTicker(heartbeat)
	defer ticker.Stop()
	for {
		var msg *hastorev1.ObserveLeaderResponse
		select {
		case l := <-changes:
			msg = &hastorev1.ObserveLeaderResponse{Event: &hastorev1.ObserveLeaderResponse_Leader{Leader: leaderToProto(l)}}
			ticker.Reset(heartbeat)
		case <-ticker.C:
			msg = &hastorev1.ObserveLeaderResponse{Event: &hastorev1.ObserveLeaderResponse_Heartbeat{Heartbeat: &jobplanev1.Heartbeat{}}}
		case err := <-observed:
			if ctx.Err() != nil {
				return nil
			}
			return mapErr(err)
		}
		if err := stream.Send(msg); err != nil {
			cancel()
			<-observed
			return err
		}
	}
}

// toConnect passes on the store's refusal of an election name, and hides
// any other failure behind UNAVAILABLE (the client tries again, or another
// server).
func (h *Handler) toConnect(err error) error {
	if connect.CodeOf(err) == connect.CodeInvalidArgument {
		var ce *connect.Error
		if errors.As(err, &ce) {
			return ce
		}
	}
	h.log.Warn("observing the leader failed", "err", err)
	return connect.NewError(connect.CodeUnavailable, errors.New("electionrpc: the leader cannot be observed"))
}

func leaderToProto(l election.Leader) *jobplanev1.LeaderInfo {
	info := &jobplanev1.LeaderInfo{Election: l.Election, Address: l.Address, ClusterAddress: l.ClusterAddress}
	if !l.Token.IsZero() {
		info.Token = &jobplanev1.FencingToken{SessionId: l.Token.SessionID, Epoch: l.Token.Epoch}
	}
	return info
}

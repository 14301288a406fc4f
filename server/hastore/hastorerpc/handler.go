package hastorerpc

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	"github.com/jobplane/jobplane/gen/jobplane/hastore/v1/hastorev1connect"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/sdk/election/electionrpc"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/internal/framing"
	"github.com/jobplane/jobplane/server/internal/unknownfield"
)

// HandlerConfig configures a Handler.
type HandlerConfig struct {
	// Store is the store to serve. Required.
	Store hastore.Store
	// Heartbeat is how long a stream may stay idle before the handler sends
	// a heartbeat. Default: 10s.
	Heartbeat time.Duration
	// Logger receives the handler's logs. Default: slog.Default().
	Logger *slog.Logger
}

// Handler serves a Store as HAStoreService. Sessions opened through it are
// renewed only by the client's KeepAlive calls; their candidacies belong
// to the session and outlive any one stream.
type Handler struct {
	hastorev1connect.UnimplementedHAStoreServiceHandler

	store     hastore.Store
	heartbeat time.Duration
	log       *slog.Logger

	mu       sync.Mutex
	sessions map[string]*serverSession
}

var _ hastorev1connect.HAStoreServiceHandler = (*Handler)(nil)

// NewHandler returns a Handler for cfg.Store.
func NewHandler(cfg HandlerConfig) *Handler {
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Handler{store: cfg.Store, heartbeat: cfg.Heartbeat, log: cfg.Logger, sessions: make(map[string]*serverSession)}
}

// Path returns the URL path and HTTP handler of the service, with opts and
// then HandlerOptions (whose codecs replace any of the same name in opts).
//
// A malformed envelope (gRPC, gRPC-Web, Connect streaming) gets
// INVALID_ARGUMENT (see package framing).
func (h *Handler) Path(opts ...connect.HandlerOption) (string, http.Handler) {
	path, handler := hastorev1connect.NewHAStoreServiceHandler(h, slices.Concat(opts, HandlerOptions())...)
	return path, framing.Strict(handler)
}

// HandlerOptions are the options every HAStoreService handler needs
// beyond its store: requests holding unknown fields, in binary or JSON, at
// any depth, are INVALID_ARGUMENT with a violation naming each, before the
// store sees them. The store's Equality compares canonical encodings,
// which a message with unknown fields does not have (see HAStoreService).
func HandlerOptions() []connect.HandlerOption {
	return unknownfield.HandlerOptions()
}

// serverSession is a remote client's session: the store session, the
// candidacies campaigning on it, and the WatchSession streams following it.
type serverSession struct {
	sess hastore.Session

	mu          sync.Mutex
	candidacies map[string]*candidacy
	held        map[string]election.Token // granted leaderships, by election
	watchers    map[chan *hastorev1.WatchSessionResponse]struct{}
	ending      bool           // the session is over; no new candidacies
	ended       bool           // and every candidacy has published its end
	wg          sync.WaitGroup // candidacy goroutines
}

type candidacy struct {
	withdraw context.CancelFunc
	done     chan struct{}
	address  string              // as campaigned with
	l        *hastore.Leadership // set once granted
	over     bool                // withdrawn, or its leadership ended
}

// watcherBuffer bounds the events queued for one WatchSession stream; a
// stream that falls this far behind is cut, and its client resynchronizes.
const watcherBuffer = 1024

func (h *Handler) session(id string) (*serverSession, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s, ok := h.sessions[id]
	if !ok {
		return nil, hastore.ErrSessionNotFound
	}
	return s, nil
}

func (h *Handler) err(err error, metadata map[string]string) error {
	return toConnect(h.log, err, metadata)
}

// OpenSession implements HAStoreServiceHandler.
func (h *Handler) OpenSession(ctx context.Context, req *hastorev1.OpenSessionRequest) (*hastorev1.OpenSessionResponse, error) {
	sess, err := h.store.OpenSession(ctx, hastore.SessionConfig{TTL: req.GetTtl().AsDuration(), ManualKeepAlive: true})
	if err != nil {
		return nil, h.err(err, nil)
	}
	s := &serverSession{
		sess:        sess,
		candidacies: make(map[string]*candidacy),
		held:        make(map[string]election.Token),
		watchers:    make(map[chan *hastorev1.WatchSessionResponse]struct{}),
	}
	h.mu.Lock()
	h.sessions[sess.ID()] = s
	h.mu.Unlock()
	go func() {
		<-sess.Done()
		h.mu.Lock()
		delete(h.sessions, sess.ID())
		h.mu.Unlock()
		s.mu.Lock()
		s.ending = true
		s.mu.Unlock()
		// The candidacies publish their revocations before the watchers
		// learn that the session is gone.
		s.wg.Wait()
		s.mu.Lock()
		s.ended = true
		for w := range s.watchers {
			close(w)
			delete(s.watchers, w)
		}
		s.mu.Unlock()
	}()
	return &hastorev1.OpenSessionResponse{SessionId: sess.ID(), Ttl: durationpb.New(sess.TTL())}, nil
}

// KeepAlive implements HAStoreServiceHandler.
func (h *Handler) KeepAlive(ctx context.Context, req *hastorev1.KeepAliveRequest) (*hastorev1.KeepAliveResponse, error) {
	md := map[string]string{"session_id": req.GetSessionId()}
	s, err := h.session(req.GetSessionId())
	if err != nil {
		return nil, h.err(err, md)
	}
	ttl, err := s.sess.KeepAlive(ctx)
	if err != nil {
		return nil, h.err(err, md)
	}
	return &hastorev1.KeepAliveResponse{Ttl: durationpb.New(ttl)}, nil
}

// CloseSession implements HAStoreServiceHandler.
func (h *Handler) CloseSession(ctx context.Context, req *hastorev1.CloseSessionRequest) (*hastorev1.CloseSessionResponse, error) {
	s, err := h.session(req.GetSessionId())
	if err != nil {
		return &hastorev1.CloseSessionResponse{}, nil
	}
	if err := s.sess.Close(ctx); err != nil {
		return nil, h.err(err, nil)
	}
	return &hastorev1.CloseSessionResponse{}, nil
}

// Campaign implements HAStoreServiceHandler: the candidacy campaigns in
// the background, on a context of its own, until withdrawn or revoked.
func (h *Handler) Campaign(ctx context.Context, req *hastorev1.CampaignRequest) (*hastorev1.CampaignResponse, error) {
	election, address := req.GetElection(), joinAddresses(req.GetAddress(), req.GetClusterAddress())
	md := map[string]string{"session_id": req.GetSessionId(), "election": election}
	if err := hastore.ValidatePublishedAddresses(req.GetAddress(), req.GetClusterAddress()); err != nil {
		return nil, h.err(err, md)
	}
	if err := hastore.ValidateCampaign(election, address); err != nil {
		return nil, h.err(err, md)
	}
	s, err := h.session(req.GetSessionId())
	if err != nil {
		return nil, h.err(err, md)
	}
	s.mu.Lock()
	if s.ending {
		s.mu.Unlock()
		return nil, h.err(hastore.ErrSessionNotFound, md)
	}
	for c := s.candidacies[election]; c != nil; c = s.candidacies[election] {
		if c.over || c.l != nil && c.l.Context().Err() != nil {
			// Ending (withdrawn, resigned, revoked): this call campaigns
			// anew once it has ended.
			s.mu.Unlock()
			select {
			case <-c.done:
			case <-ctx.Done():
				return nil, h.err(ctx.Err(), md)
			}
			s.mu.Lock()
			continue
		}
		s.mu.Unlock()
		if c.address == address {
			// The same call again, as after a lost answer: it stands.
			return &hastorev1.CampaignResponse{}, nil
		}
		return nil, h.err(hastore.ErrCandidacyExists, md)
	}
	if s.ending {
		s.mu.Unlock()
		return nil, h.err(hastore.ErrSessionNotFound, md)
	}
	cctx, withdraw := context.WithCancel(context.Background())
	c := &candidacy{withdraw: withdraw, done: make(chan struct{}), address: address}
	s.candidacies[election] = c
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		defer close(c.done)
		defer withdraw()
		h.runCandidacy(cctx, s, c, election, address)
	}()
	return &hastorev1.CampaignResponse{}, nil
}

func (h *Handler) runCandidacy(ctx context.Context, s *serverSession, c *candidacy, election, address string) {
	defer func() {
		s.mu.Lock()
		delete(s.candidacies, election)
		s.mu.Unlock()
	}()
	// The client was told its candidacy stands: campaign until granted,
	// withdrawn, or the session ends, riding out store outages.
	var l *hastore.Leadership
	for backoff := 50 * time.Millisecond; ; backoff = min(2*backoff, 2*time.Second) {
		var err error
		if l, err = s.sess.Campaign(ctx, election, address); err == nil {
			break
		}
		if ctx.Err() != nil || errors.Is(err, hastore.ErrSessionNotFound) {
			return
		}
		h.log.Warn("campaign failed; retrying", "session", s.sess.ID(), "election", election, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-s.sess.Done():
			return
		case <-time.After(backoff):
		}
	}
	token := l.Token()
	s.mu.Lock()
	c.l = l
	s.held[election] = token
	s.publishLocked(&hastorev1.WatchSessionResponse{Event: &hastorev1.WatchSessionResponse_Granted{
		Granted: &hastorev1.WatchSessionResponse_LeadershipGranted{Election: election, Token: tokenToProto(token)},
	}})
	s.mu.Unlock()

	select {
	case <-l.Done():
	case <-ctx.Done():
	}
	s.mu.Lock()
	c.over = true
	s.mu.Unlock()
	if ctx.Err() != nil {
		// Withdrawn: resign, retrying until the store records it or the
		// leadership ends anyway.
		for backoff := 50 * time.Millisecond; l.Context().Err() == nil; backoff = min(2*backoff, 2*time.Second) {
			rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := l.Resign(rctx)
			cancel()
			if err == nil {
				break
			}
			h.log.Warn("resign on withdraw; retrying", "election", election, "err", err)
			select {
			case <-l.Done():
			case <-time.After(backoff):
			}
		}
	}
	s.mu.Lock()
	delete(s.held, election)
	s.publishLocked(&hastorev1.WatchSessionResponse{Event: &hastorev1.WatchSessionResponse_Revoked{
		Revoked: &hastorev1.WatchSessionResponse_LeadershipRevoked{
			Election: election, Token: tokenToProto(token), Reason: revocationReason(context.Cause(l.Context())),
		},
	}})
	s.mu.Unlock()
}

// publishLocked queues ev for every watcher; a watcher whose queue is full
// is cut off and resynchronizes when it reconnects.
func (s *serverSession) publishLocked(ev *hastorev1.WatchSessionResponse) {
	for w := range s.watchers {
		select {
		case w <- ev:
		default:
			close(w)
			delete(s.watchers, w)
		}
	}
}

// Withdraw implements HAStoreServiceHandler. It returns once the candidacy
// has ended.
func (h *Handler) Withdraw(ctx context.Context, req *hastorev1.WithdrawRequest) (*hastorev1.WithdrawResponse, error) {
	md := map[string]string{"session_id": req.GetSessionId(), "election": req.GetElection()}
	if err := hastore.ValidateElection(req.GetElection()); err != nil {
		return nil, h.err(err, md)
	}
	s, err := h.session(req.GetSessionId())
	if err != nil {
		return nil, h.err(err, md)
	}
	s.mu.Lock()
	c := s.candidacies[req.GetElection()]
	if c != nil {
		c.over = true
	}
	s.mu.Unlock()
	if c != nil {
		c.withdraw()
		select {
		case <-c.done:
		case <-ctx.Done():
			return nil, h.err(ctx.Err(), nil)
		}
	}
	return &hastorev1.WithdrawResponse{}, nil
}

// WatchSession implements HAStoreServiceHandler.
func (h *Handler) WatchSession(ctx context.Context, req *hastorev1.WatchSessionRequest, stream *connect.ServerStream[hastorev1.WatchSessionResponse]) error {
	md := map[string]string{"session_id": req.GetSessionId()}
	s, err := h.session(req.GetSessionId())
	if err != nil {
		return h.err(err, md)
	}
	events := make(chan *hastorev1.WatchSessionResponse, watcherBuffer)
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return h.err(hastore.ErrSessionNotFound, md)
	}
	var initial []*hastorev1.WatchSessionResponse
	for election, token := range s.held {
		initial = append(initial, &hastorev1.WatchSessionResponse{Event: &hastorev1.WatchSessionResponse_Granted{
			Granted: &hastorev1.WatchSessionResponse_LeadershipGranted{Election: election, Token: tokenToProto(token)},
		}})
	}
	s.watchers[events] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		if _, ok := s.watchers[events]; ok {
			delete(s.watchers, events)
		}
		s.mu.Unlock()
	}()

	// The snapshot, and its end: the headers go out now, so a client knows
	// it is subscribed even before the first event.
	initial = append(initial, &hastorev1.WatchSessionResponse{Event: &hastorev1.WatchSessionResponse_SnapshotEnd_{SnapshotEnd: &hastorev1.WatchSessionResponse_SnapshotEnd{}}})
	for _, ev := range initial {
		if err := stream.Send(ev); err != nil {
			return err
		}
	}
	ticker := time.NewTicker(h.heartbeat)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-events:
			if !ok {
				s.mu.Lock()
				ended := s.ended
				s.mu.Unlock()
				if ended {
					return h.err(hastore.ErrSessionNotFound, md)
				}
				return toConnect(h.log, errStreamBehind, md)
			}
			if err := stream.Send(ev); err != nil {
				return err
			}
			ticker.Reset(h.heartbeat)
		case <-ticker.C:
			if err := stream.Send(heartbeatEvent()); err != nil {
				return err
			}
		}
	}
}

func heartbeatEvent() *hastorev1.WatchSessionResponse {
	return &hastorev1.WatchSessionResponse{Event: &hastorev1.WatchSessionResponse_Heartbeat{Heartbeat: &jobplanev1.Heartbeat{}}}
}

// Resign implements HAStoreServiceHandler. If a candidacy of this handler
// holds the leadership, Resign returns once it has ended, so the session
// may campaign again at once.
func (h *Handler) Resign(ctx context.Context, req *hastorev1.ResignRequest) (*hastorev1.ResignResponse, error) {
	f := fenceFromProto(req.GetFence())
	if err := h.store.Resign(ctx, f); err != nil {
		return nil, h.err(err, map[string]string{"election": f.Election})
	}
	if s, err := h.session(f.Token.SessionID); err == nil {
		s.mu.Lock()
		c := s.candidacies[f.Election]
		held := c != nil && c.l != nil && c.l.Token() == f.Token
		s.mu.Unlock()
		if held {
			select {
			case <-c.done:
			case <-ctx.Done():
			}
		}
	}
	return &hastorev1.ResignResponse{}, nil
}

// ConfirmLeadership implements HAStoreServiceHandler.
func (h *Handler) ConfirmLeadership(ctx context.Context, req *hastorev1.ConfirmLeadershipRequest) (*hastorev1.ConfirmLeadershipResponse, error) {
	f := fenceFromProto(req.GetFence())
	if err := hastore.ValidatePublishedAddresses(req.GetAddress(), req.GetClusterAddress()); err != nil {
		return nil, h.err(err, map[string]string{"election": f.Election})
	}
	if err := h.store.ConfirmLeadership(ctx, f, joinAddresses(req.GetAddress(), req.GetClusterAddress())); err != nil {
		return nil, h.err(err, map[string]string{"election": f.Election})
	}
	return &hastorev1.ConfirmLeadershipResponse{}, nil
}

// GetLeader implements HAStoreServiceHandler.
func (h *Handler) GetLeader(ctx context.Context, req *hastorev1.GetLeaderRequest) (*hastorev1.GetLeaderResponse, error) {
	info, err := h.store.Leader(ctx, req.GetElection())
	if err != nil {
		return nil, h.err(err, nil)
	}
	return &hastorev1.GetLeaderResponse{Leader: leaderToProto(info)}, nil
}

// ObserveLeader implements HAStoreServiceHandler: it validates the
// election name, then streams the leader, its changes and heartbeats on
// idle as electionrpc.StreamLeader does, with the store's errors mapped as
// every other RPC of the handler maps them.
func (h *Handler) ObserveLeader(ctx context.Context, req *hastorev1.ObserveLeaderRequest, stream *connect.ServerStream[hastorev1.ObserveLeaderResponse]) error {
	if err := hastore.ValidateElection(req.GetElection()); err != nil {
		return h.err(err, nil)
	}
	return electionrpc.StreamLeader(ctx, h.store, req.GetElection(), h.heartbeat, stream, func(err error) error { return h.err(err, nil) })
}

// PutExecutionPlan implements HAStoreServiceHandler.
func (h *Handler) PutExecutionPlan(ctx context.Context, req *hastorev1.PutExecutionPlanRequest) (*hastorev1.PutExecutionPlanResponse, error) {
	f := fenceFromProto(req.GetFence())
	created, err := h.store.PutExecutionPlanCreated(ctx, f, req.GetPlan())
	if err != nil {
		return nil, h.err(err, map[string]string{"election": f.Election, "job_id": req.GetPlan().GetJobId()})
	}
	return &hastorev1.PutExecutionPlanResponse{Created: created}, nil
}

// GetExecutionPlan implements HAStoreServiceHandler.
func (h *Handler) GetExecutionPlan(ctx context.Context, req *hastorev1.GetExecutionPlanRequest) (*hastorev1.GetExecutionPlanResponse, error) {
	plan, err := h.store.GetExecutionPlan(ctx, req.GetJobId())
	if err != nil {
		return nil, h.err(err, map[string]string{"job_id": req.GetJobId()})
	}
	record, err := h.store.Cancellation(ctx, req.GetJobId())
	if err != nil {
		return nil, h.err(err, map[string]string{"job_id": req.GetJobId()})
	}
	resp := &hastorev1.GetExecutionPlanResponse{Plan: plan, CancelRequested: record != nil}
	if record != nil && !proto.Equal(record, &jobplanev1.Cancellation{}) {
		resp.Cancellation = record
	}
	return resp, nil
}

// RequestJobCancel implements HAStoreServiceHandler.
func (h *Handler) RequestJobCancel(ctx context.Context, req *hastorev1.RequestJobCancelRequest) (*hastorev1.RequestJobCancelResponse, error) {
	f := fenceFromProto(req.GetFence())
	if err := h.store.RequestCancel(ctx, f, req.GetJobId(), req.GetCancellation()); err != nil {
		return nil, h.err(err, map[string]string{"election": f.Election, "job_id": req.GetJobId()})
	}
	return &hastorev1.RequestJobCancelResponse{}, nil
}

// defaultPageSize is the page size of listings that ask for none.
const defaultPageSize = 1000

func pageSize(n int32) int {
	if n <= 0 || n > defaultPageSize {
		return defaultPageSize
	}
	return int(n)
}

// ListExecutionPlans implements HAStoreServiceHandler. The page token is
// the last job id of the previous page.
func (h *Handler) ListExecutionPlans(ctx context.Context, req *hastorev1.ListExecutionPlansRequest) (*hastorev1.ListExecutionPlansResponse, error) {
	if req.GetPageSize() < 0 {
		return nil, h.err(hastore.ValidateList("", -1), nil)
	}
	size := pageSize(req.GetPageSize())
	ids, err := h.store.ListExecutionPlans(ctx, req.GetPageToken(), size)
	if err != nil {
		return nil, h.err(err, nil)
	}
	resp := &hastorev1.ListExecutionPlansResponse{JobIds: ids}
	if len(ids) == size {
		resp.NextPageToken = ids[len(ids)-1]
	}
	return resp, nil
}

// DeleteExecutionPlan implements HAStoreServiceHandler.
func (h *Handler) DeleteExecutionPlan(ctx context.Context, req *hastorev1.DeleteExecutionPlanRequest) (*hastorev1.DeleteExecutionPlanResponse, error) {
	f := fenceFromProto(req.GetFence())
	if err := h.store.DeleteExecutionPlan(ctx, f, req.GetJobId()); err != nil {
		return nil, h.err(err, map[string]string{"election": f.Election, "job_id": req.GetJobId()})
	}
	return &hastorev1.DeleteExecutionPlanResponse{}, nil
}

// CreateDirtyJobResult implements HAStoreServiceHandler.
func (h *Handler) CreateDirtyJobResult(ctx context.Context, req *hastorev1.CreateDirtyJobResultRequest) (*hastorev1.CreateDirtyJobResultResponse, error) {
	f := fenceFromProto(req.GetFence())
	if err := h.store.CreateDirtyJobResult(ctx, f, req.GetResult()); err != nil {
		return nil, h.err(err, map[string]string{"election": f.Election, "job_id": req.GetResult().GetJobId()})
	}
	return &hastorev1.CreateDirtyJobResultResponse{}, nil
}

// MarkJobResultClean implements HAStoreServiceHandler.
func (h *Handler) MarkJobResultClean(ctx context.Context, req *hastorev1.MarkJobResultCleanRequest) (*hastorev1.MarkJobResultCleanResponse, error) {
	f := fenceFromProto(req.GetFence())
	if err := h.store.MarkJobResultClean(ctx, f, req.GetJobId()); err != nil {
		return nil, h.err(err, map[string]string{"election": f.Election, "job_id": req.GetJobId()})
	}
	return &hastorev1.MarkJobResultCleanResponse{}, nil
}

// GetJobResultEntry implements HAStoreServiceHandler.
func (h *Handler) GetJobResultEntry(ctx context.Context, req *hastorev1.GetJobResultEntryRequest) (*hastorev1.GetJobResultEntryResponse, error) {
	e, err := h.store.GetJobResultEntry(ctx, req.GetJobId())
	if err != nil {
		return nil, h.err(err, map[string]string{"job_id": req.GetJobId()})
	}
	return &hastorev1.GetJobResultEntryResponse{Entry: e}, nil
}

// ListJobResultEntries implements HAStoreServiceHandler. The page token is
// the last job id of the previous page.
func (h *Handler) ListJobResultEntries(ctx context.Context, req *hastorev1.ListJobResultEntriesRequest) (*hastorev1.ListJobResultEntriesResponse, error) {
	if req.GetPageSize() < 0 {
		return nil, h.err(hastore.ValidateList("", -1), nil)
	}
	size := pageSize(req.GetPageSize())
	entries, err := h.store.ListJobResultEntries(ctx, req.GetState(), req.GetPageToken(), size)
	if err != nil {
		return nil, h.err(err, nil)
	}
	resp := &hastorev1.ListJobResultEntriesResponse{Entries: entries}
	if kept := fitPage(entries); kept < len(entries) || len(entries) == size {
		resp.Entries = entries[:kept]
		resp.NextPageToken = entries[kept-1].GetResult().GetJobId()
	}
	return resp, nil
}

// maxPageBytes bounds the encoded entries of one page of job results, far
// under any answer limit a server runs with (16 MiB by default): a result
// may take up to the store's limit (1 MiB by default) with its values and
// placements, so a page of a thousand could not be sent.
const maxPageBytes = 4 << 20

// fitPage returns how many of entries (at least one) fit maxPageBytes.
func fitPage(entries []*hastorev1.JobResultEntry) int {
	n := 0
	for i, e := range entries {
		if n += proto.Size(e) + 8; n > maxPageBytes && i > 0 {
			return i
		}
	}
	return len(entries)
}

// DeleteJobResultEntry implements HAStoreServiceHandler.
func (h *Handler) DeleteJobResultEntry(ctx context.Context, req *hastorev1.DeleteJobResultEntryRequest) (*hastorev1.DeleteJobResultEntryResponse, error) {
	f := fenceFromProto(req.GetFence())
	if err := h.store.DeleteJobResultEntry(ctx, f, req.GetJobId()); err != nil {
		return nil, h.err(err, map[string]string{"election": f.Election, "job_id": req.GetJobId()})
	}
	return &hastorev1.DeleteJobResultEntryResponse{}, nil
}

// members returns the store's TaskExecutor membership, or an UNIMPLEMENTED
// error for a store without one.
func (h *Handler) members() (hastore.Members, error) {
	m, ok := h.store.(hastore.Members)
	if !ok {
		return nil, connect.NewError(connect.CodeUnimplemented, hastore.ErrMembersUnsupported)
	}
	return m, nil
}

// AddTaskExecutor implements HAStoreServiceHandler.
func (h *Handler) AddTaskExecutor(ctx context.Context, req *hastorev1.AddTaskExecutorRequest) (*hastorev1.AddTaskExecutorResponse, error) {
	m, err := h.members()
	if err != nil {
		return nil, err
	}
	f := fenceFromProto(req.GetFence())
	if err := m.AddTaskExecutor(ctx, f, req.GetTaskExecutorId()); err != nil {
		return nil, h.err(err, map[string]string{"election": f.Election, "task_executor_id": req.GetTaskExecutorId()})
	}
	return &hastorev1.AddTaskExecutorResponse{}, nil
}

// RemoveTaskExecutor implements HAStoreServiceHandler.
func (h *Handler) RemoveTaskExecutor(ctx context.Context, req *hastorev1.RemoveTaskExecutorRequest) (*hastorev1.RemoveTaskExecutorResponse, error) {
	m, err := h.members()
	if err != nil {
		return nil, err
	}
	f := fenceFromProto(req.GetFence())
	if err := m.RemoveTaskExecutor(ctx, f, req.GetTaskExecutorId()); err != nil {
		return nil, h.err(err, map[string]string{"election": f.Election, "task_executor_id": req.GetTaskExecutorId()})
	}
	return &hastorev1.RemoveTaskExecutorResponse{}, nil
}

// ListTaskExecutors implements HAStoreServiceHandler. The page token is
// the last id of the previous page.
func (h *Handler) ListTaskExecutors(ctx context.Context, req *hastorev1.ListTaskExecutorsRequest) (*hastorev1.ListTaskExecutorsResponse, error) {
	m, err := h.members()
	if err != nil {
		return nil, err
	}
	if req.GetPageSize() < 0 {
		return nil, h.err(hastore.ValidateList("", -1), nil)
	}
	size := pageSize(req.GetPageSize())
	ids, err := m.TaskExecutors(ctx)
	if err != nil {
		return nil, h.err(err, nil)
	}
	// The membership is small (one id per TaskExecutor): a page is cut
	// from the whole list.
	from, _ := slices.BinarySearch(ids, req.GetPageToken())
	if from < len(ids) && ids[from] == req.GetPageToken() {
		from++
	}
	ids = ids[from:]
	resp := &hastorev1.ListTaskExecutorsResponse{}
	if len(ids) > size {
		ids = ids[:size]
		resp.NextPageToken = ids[size-1]
	}
	resp.TaskExecutorIds = ids
	return resp, nil
}

// checkpoints returns the store's checkpoints and savepoints, or an
// UNIMPLEMENTED error for a store without them.
func (h *Handler) checkpoints() (hastore.Checkpoints, error) {
	c, ok := h.store.(hastore.Checkpoints)
	if !ok {
		return nil, connect.NewError(connect.CodeUnimplemented, hastore.ErrCheckpointsUnsupported)
	}
	return c, nil
}

// maxCheckpointPage is the default and largest page of ListCheckpoints
// and ListSavepoints: their items may be as large as a plan.
const maxCheckpointPage = 100

func checkpointPageSize(n int32) int {
	if n <= 0 || n > maxCheckpointPage {
		return maxCheckpointPage
	}
	return int(n)
}

// AddCheckpoint implements HAStoreServiceHandler.
func (h *Handler) AddCheckpoint(ctx context.Context, req *hastorev1.AddCheckpointRequest) (*hastorev1.AddCheckpointResponse, error) {
	c, err := h.checkpoints()
	if err != nil {
		return nil, err
	}
	f := fenceFromProto(req.GetFence())
	cp := req.GetCheckpoint()
	subsumed, err := c.AddCheckpoint(ctx, f, cp, int(req.GetRetain()))
	if err != nil {
		return nil, h.err(err, map[string]string{"election": f.Election, "job_id": cp.GetJobId(), "checkpoint_id": strconv.FormatUint(cp.GetCheckpointId(), 10)})
	}
	return &hastorev1.AddCheckpointResponse{SubsumedCheckpointIds: subsumed}, nil
}

// GetLatestCheckpoint implements HAStoreServiceHandler.
func (h *Handler) GetLatestCheckpoint(ctx context.Context, req *hastorev1.GetLatestCheckpointRequest) (*hastorev1.GetLatestCheckpointResponse, error) {
	c, err := h.checkpoints()
	if err != nil {
		return nil, err
	}
	cp, last, err := c.LatestCheckpoint(ctx, req.GetJobId())
	if err != nil {
		return nil, h.err(err, map[string]string{"job_id": req.GetJobId()})
	}
	return &hastorev1.GetLatestCheckpointResponse{Checkpoint: cp, LastCheckpointId: last}, nil
}

// ListCheckpoints implements HAStoreServiceHandler. The page token is the
// last checkpoint id of the previous page, in decimal.
func (h *Handler) ListCheckpoints(ctx context.Context, req *hastorev1.ListCheckpointsRequest) (*hastorev1.ListCheckpointsResponse, error) {
	c, err := h.checkpoints()
	if err != nil {
		return nil, err
	}
	md := map[string]string{"job_id": req.GetJobId()}
	if req.GetPageSize() < 0 {
		return nil, h.err(hastore.ValidateCheckpointList(req.GetJobId(), -1), md)
	}
	var after uint64
	if tok := req.GetPageToken(); tok != "" {
		if after, err = strconv.ParseUint(tok, 10, 64); err != nil {
			return nil, h.err(&hastore.ValidationError{Violations: []hastore.FieldViolation{{Field: "page_token", Description: "not a token of this listing"}}}, md)
		}
	}
	size := checkpointPageSize(req.GetPageSize())
	cps, err := c.ListCheckpoints(ctx, req.GetJobId(), after, size)
	if err != nil {
		return nil, h.err(err, md)
	}
	resp := &hastorev1.ListCheckpointsResponse{Checkpoints: cps}
	if len(cps) == size {
		resp.NextPageToken = strconv.FormatUint(cps[len(cps)-1].GetCheckpointId(), 10)
	}
	return resp, nil
}

// AddSavepoint implements HAStoreServiceHandler.
func (h *Handler) AddSavepoint(ctx context.Context, req *hastorev1.AddSavepointRequest) (*hastorev1.AddSavepointResponse, error) {
	c, err := h.checkpoints()
	if err != nil {
		return nil, err
	}
	f := fenceFromProto(req.GetFence())
	sp := req.GetSavepoint()
	if err := c.AddSavepoint(ctx, f, sp); err != nil {
		return nil, h.err(err, map[string]string{"election": f.Election, "job_id": sp.GetJobId(), "savepoint_id": sp.GetSavepointId(), "checkpoint_id": strconv.FormatUint(sp.GetCheckpointId(), 10)})
	}
	return &hastorev1.AddSavepointResponse{}, nil
}

// GetSavepoint implements HAStoreServiceHandler.
func (h *Handler) GetSavepoint(ctx context.Context, req *hastorev1.GetSavepointRequest) (*hastorev1.GetSavepointResponse, error) {
	c, err := h.checkpoints()
	if err != nil {
		return nil, err
	}
	sp, err := c.GetSavepoint(ctx, req.GetSavepointId())
	if err != nil {
		return nil, h.err(err, map[string]string{"savepoint_id": req.GetSavepointId()})
	}
	return &hastorev1.GetSavepointResponse{Savepoint: sp}, nil
}

// ListSavepoints implements HAStoreServiceHandler. The page token is the
// last savepoint id of the previous page.
func (h *Handler) ListSavepoints(ctx context.Context, req *hastorev1.ListSavepointsRequest) (*hastorev1.ListSavepointsResponse, error) {
	c, err := h.checkpoints()
	if err != nil {
		return nil, err
	}
	if req.GetPageSize() < 0 {
		return nil, h.err(hastore.ValidateSavepointList(req.GetJobId(), req.GetPageToken(), -1), nil)
	}
	size := checkpointPageSize(req.GetPageSize())
	sps, err := c.ListSavepoints(ctx, req.GetJobId(), req.GetPageToken(), size)
	if err != nil {
		return nil, h.err(err, nil)
	}
	resp := &hastorev1.ListSavepointsResponse{Savepoints: sps}
	if len(sps) == size {
		resp.NextPageToken = sps[len(sps)-1].GetSavepointId()
	}
	return resp, nil
}

// DeleteSavepoint implements HAStoreServiceHandler.
func (h *Handler) DeleteSavepoint(ctx context.Context, req *hastorev1.DeleteSavepointRequest) (*hastorev1.DeleteSavepointResponse, error) {
	c, err := h.checkpoints()
	if err != nil {
		return nil, err
	}
	f := fenceFromProto(req.GetFence())
	if err := c.DeleteSavepoint(ctx, f, req.GetSavepointId()); err != nil {
		return nil, h.err(err, map[string]string{"election": f.Election, "savepoint_id": req.GetSavepointId()})
	}
	return &hastorev1.DeleteSavepointResponse{}, nil
}

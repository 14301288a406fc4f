package hastorerpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	"github.com/jobplane/jobplane/gen/jobplane/hastore/v1/hastorev1connect"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/server/hastore"
)

// ClientConfig configures a Client.
type ClientConfig struct {
	// HTTPClient carries the calls; it must support HTTP/2 (or h2c) for
	// the gRPC protocol, and any protocol works over HTTP/1.1. Required.
	HTTPClient connect.HTTPClient
	// BaseURL is the HA store's base URL, such as "http://127.0.0.1:7001".
	// Required.
	BaseURL string
	// Options are passed to the generated Connect client.
	Options []connect.ClientOption
	// Logger receives the client's logs. Default: slog.Default().
	Logger *slog.Logger
}

// Client is a hastore.Store served by a remote HAStoreService. Sessions
// are renewed over the network (unless opened with ManualKeepAlive), and
// each session follows its candidacies on one WatchSession stream that it
// reopens when it breaks.
type Client struct {
	rpc hastorev1connect.HAStoreServiceClient
	log *slog.Logger

	mu       sync.Mutex
	sessions map[string]*clientSession
}

var _ hastore.Store = (*Client)(nil)

// NewClient returns a Store that calls the HAStoreService at cfg.BaseURL.
func NewClient(cfg ClientConfig) *Client {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Client{
		rpc:      hastorev1connect.NewHAStoreServiceClient(cfg.HTTPClient, cfg.BaseURL, cfg.Options...),
		log:      cfg.Logger,
		sessions: make(map[string]*clientSession),
	}
}

// Close implements hastore.Store. Open sessions stay open until closed or
// expired.
func (c *Client) Close() error { return nil }

// OpenSession implements hastore.Store.
func (c *Client) OpenSession(ctx context.Context, cfg hastore.SessionConfig) (hastore.Session, error) {
	if err := hastore.ValidateSessionConfig(cfg); err != nil {
		return nil, err
	}
	sent := time.Now()
	resp, err := c.rpc.OpenSession(ctx, &hastorev1.OpenSessionRequest{Ttl: durationpb.New(cfg.TTL)})
	if err != nil {
		return nil, fromConnect(err)
	}
	sctx, cancel := context.WithCancelCause(context.Background())
	s := &clientSession{
		c:           c,
		id:          resp.GetSessionId(),
		ttl:         resp.GetTtl().AsDuration(),
		ctx:         sctx,
		cancel:      cancel,
		done:        make(chan struct{}),
		candidacies: make(map[string]*clientCandidacy),
		orphans:     make(map[string]chan struct{}),
	}
	// The session ends here once the store may have expired it: TTL after
	// the last renewal was sent, less a margin for clock rates.
	s.validity = hastore.NewValidity(sent, s.ttl, func() { s.cancel(hastore.ErrSessionEnded) })
	context.AfterFunc(sctx, s.validity.Stop)
	c.mu.Lock()
	c.sessions[s.id] = s
	c.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.watch()
	}()
	if !cfg.ManualKeepAlive {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.renew()
		}()
	}
	go func() {
		s.wg.Wait()
		c.mu.Lock()
		delete(c.sessions, s.id)
		c.mu.Unlock()
		close(s.done)
	}()
	return s, nil
}

type clientSession struct {
	c   *Client
	id  string
	ttl time.Duration

	ctx    context.Context // ends when the session ends
	cancel context.CancelCauseFunc
	done   chan struct{} // closed once the session's goroutines are gone
	wg     sync.WaitGroup

	validity *hastore.Validity // ends the session once it may have expired

	mu          sync.Mutex
	candidacies map[string]*clientCandidacy
	// orphans are the elections whose grant came to no local candidacy,
	// closed once that leadership is handed back: a campaign in such an
	// election waits for it, or the server's answer that the candidacy
	// stands (Campaign is idempotent) would name the one being resigned.
	orphans map[string]chan struct{}
}

// clientCandidacy is a candidacy of the session: waiting for its grant,
// then leading until its end. Its fields are guarded by the session's mu.
type clientCandidacy struct {
	granted chan election.Token // receives the grant once
	token   election.Token      // set once granted
	end     func(cause error)   // ends the leadership and frees the election
	revoked error               // a revocation that came before end was set
}

func (s *clientSession) ID() string            { return s.id }
func (s *clientSession) TTL() time.Duration    { return s.ttl }
func (s *clientSession) Done() <-chan struct{} { return s.ctx.Done() }

func (s *clientSession) ValidUntil() time.Time {
	if s.ctx.Err() != nil {
		return time.Time{}
	}
	return s.validity.Until()
}

// renew keeps the session alive until it ends, renewing every sixth of
// the TTL (as the etcd backend does): a renewal held until it times out
// then still leaves most of the lease, which the TaskExecutors use as a
// deadline for the leader's tasks. If renewals keep failing, the expiry
// timer ends the session before the store would expire it.
func (s *clientSession) renew() {
	interval := max(s.ttl/6, 10*time.Millisecond)
	timer := time.NewTimer(interval)
	defer timer.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-timer.C:
		}
		ctx, cancel := context.WithTimeout(s.ctx, interval)
		_, err := s.KeepAlive(ctx)
		cancel()
		if errors.Is(err, hastore.ErrSessionNotFound) {
			return
		}
		next := interval
		if err != nil && s.ctx.Err() == nil {
			s.c.log.Warn("session renewal failed", "session", s.id, "err", err)
			// Try again soon: a full interval more could outlast the
			// lease the last renewal bought.
			next = min(interval/4, time.Second)
		}
		timer.Reset(next)
	}
}

// watch follows the session's candidacies on WatchSession, reconnecting
// until the session ends.
func (s *clientSession) watch() {
	backoff := 50 * time.Millisecond
	for s.ctx.Err() == nil {
		err := s.watchOnce()
		if errors.Is(fromConnect(err), hastore.ErrSessionNotFound) {
			s.cancel(hastore.ErrSessionEnded)
			break
		}
		select {
		case <-s.ctx.Done():
		case <-time.After(backoff):
			backoff = min(2*backoff, time.Second)
		}
	}
	// The session is over: every leadership of it has ended.
	s.mu.Lock()
	var ends []func(error)
	for _, c := range s.candidacies {
		if c.end != nil {
			ends = append(ends, c.end)
		}
	}
	s.mu.Unlock()
	for _, end := range ends {
		end(hastore.ErrSessionEnded)
	}
}

func (s *clientSession) watchOnce() error {
	stream, err := s.c.rpc.WatchSession(s.ctx, &hastorev1.WatchSessionRequest{SessionId: s.id})
	if err != nil {
		return err
	}
	defer stream.Close()
	// The snapshot: the leaderships the session holds now. Those that
	// ended while no stream was open were never reported: those this side
	// still holds and the snapshot lacks.
	snapshot := map[string]election.Token{}
	for stream.Receive() {
		switch ev := stream.Msg().GetEvent().(type) {
		case *hastorev1.WatchSessionResponse_Granted:
			token := tokenFromProto(ev.Granted.GetToken())
			if snapshot != nil {
				snapshot[ev.Granted.GetElection()] = token
			}
			s.granted(ev.Granted.GetElection(), token)
		case *hastorev1.WatchSessionResponse_Revoked:
			s.revoked(ev.Revoked.GetElection(), tokenFromProto(ev.Revoked.GetToken()), revocationCause(ev.Revoked.GetReason()))
		case *hastorev1.WatchSessionResponse_SnapshotEnd_:
			if snapshot != nil {
				s.resync(snapshot)
				snapshot = nil
			}
		}
	}
	return stream.Err()
}

func (s *clientSession) granted(name string, token election.Token) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.candidacies[name]
	switch {
	case c == nil:
		// A candidacy this side gave up on (a campaign whose outcome was
		// lost, or a failed withdrawal) was granted: hand it back, or the
		// election would be held by no one.
		if s.orphans[name] == nil {
			done := make(chan struct{})
			s.orphans[name] = done
			go s.resignOrphan(hastore.Fence{Election: name, Token: token}, done)
		}
	case c.token.IsZero():
		c.token = token
		c.granted <- token // buffered, and sent at most once
	}
	// Otherwise a resync repeats a grant already known.
}

// resignOrphan resigns a leadership that no local candidacy holds,
// retrying until the store takes it or the session ends, and then closes
// done.
func (s *clientSession) resignOrphan(f hastore.Fence, done chan struct{}) {
	defer func() {
		s.mu.Lock()
		if s.orphans[f.Election] == done {
			delete(s.orphans, f.Election)
		}
		s.mu.Unlock()
		close(done)
	}()
	for backoff := 50 * time.Millisecond; s.ctx.Err() == nil; backoff = min(2*backoff, 2*time.Second) {
		ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
		_, err := s.c.rpc.Resign(ctx, &hastorev1.ResignRequest{Fence: fenceToProto(f)})
		cancel()
		if err == nil {
			return
		}
		if s.ctx.Err() == nil {
			s.c.log.Warn("resigning an abandoned leadership; retrying", "election", f.Election, "err", err)
		}
		select {
		case <-s.ctx.Done():
		case <-time.After(backoff):
		}
	}
}

func (s *clientSession) revoked(name string, token election.Token, cause error) {
	s.mu.Lock()
	c := s.candidacies[name]
	if c == nil || c.token != token {
		s.mu.Unlock()
		return
	}
	end := c.end
	if end == nil {
		// Campaign has not returned the leadership yet; it ends it at once.
		c.revoked = cause
	}
	s.mu.Unlock()
	if end != nil {
		end(cause)
	}
}

// resync ends the leaderships this side holds that the store's snapshot
// of the session lacks: they ended while no stream was open.
func (s *clientSession) resync(snapshot map[string]election.Token) {
	type held struct {
		election string
		token    election.Token
	}
	s.mu.Lock()
	var gone []held
	for e, c := range s.candidacies {
		if !c.token.IsZero() && snapshot[e] != c.token {
			gone = append(gone, held{e, c.token})
		}
	}
	s.mu.Unlock()
	for _, h := range gone {
		s.revoked(h.election, h.token, hastore.ErrLeaderDeleted)
	}
}

func (s *clientSession) KeepAlive(ctx context.Context) (time.Duration, error) {
	if s.ctx.Err() != nil {
		return 0, hastore.ErrSessionNotFound
	}
	sent := time.Now()
	resp, err := s.c.rpc.KeepAlive(ctx, &hastorev1.KeepAliveRequest{SessionId: s.id})
	if err = fromConnect(err); err != nil {
		if errors.Is(err, hastore.ErrSessionNotFound) {
			s.cancel(hastore.ErrSessionEnded)
		}
		return 0, err
	}
	s.validity.Renewed(sent, s.ttl)
	return resp.GetTtl().AsDuration(), nil
}

func (s *clientSession) Close(ctx context.Context) error {
	_, err := s.c.rpc.CloseSession(ctx, &hastorev1.CloseSessionRequest{SessionId: s.id})
	s.cancel(hastore.ErrSessionEnded)
	<-s.done
	return fromConnect(err)
}

// PutExecutionPlanAndLead implements hastore.Session without a candidacy:
// HAStoreService has no call that puts a plan and campaigns at once, so it
// puts the plan (hastore.PutExecutionPlanNoLead) and the caller campaigns
// for the job as usual.
func (s *clientSession) PutExecutionPlanAndLead(ctx context.Context, f hastore.Fence, plan *hastorev1.ExecutionPlan, _ string) (*hastore.Leadership, error) {
	return hastore.PutExecutionPlanNoLead(ctx, s.c, f, plan)
}

func (s *clientSession) Campaign(ctx context.Context, name, address string) (*hastore.Leadership, error) {
	if err := hastore.ValidateCampaign(name, address); err != nil {
		return nil, err
	}
	s.mu.Lock()
	for orphan := s.orphans[name]; orphan != nil; orphan = s.orphans[name] {
		s.mu.Unlock()
		select {
		case <-orphan:
		case <-s.ctx.Done():
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		s.mu.Lock()
		if s.ctx.Err() != nil {
			break
		}
	}
	switch {
	case s.ctx.Err() != nil:
		s.mu.Unlock()
		return nil, hastore.ErrSessionNotFound
	case s.candidacies[name] != nil:
		s.mu.Unlock()
		return nil, hastore.ErrCandidacyExists
	}
	c := &clientCandidacy{granted: make(chan election.Token, 1)}
	s.candidacies[name] = c
	s.mu.Unlock()
	release := func() {
		s.mu.Lock()
		if s.candidacies[name] == c {
			delete(s.candidacies, name)
		}
		s.mu.Unlock()
	}

	withdraw := func() {
		// Until answered, or the session is over: a candidacy that stands
		// is one the store may grant later, after the job's result (see
		// HAStoreService.CreateDirtyJobResult), and the caller, told the
		// campaign failed, writes the result next. A grant that comes
		// meanwhile finds no local candidacy and is handed back (see
		// granted).
		for backoff := 50 * time.Millisecond; s.ctx.Err() == nil; backoff = min(2*backoff, time.Second) {
			wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			_, err := s.c.rpc.Withdraw(wctx, &hastorev1.WithdrawRequest{Election: name, SessionId: s.id})
			cancel()
			if err == nil || errors.Is(fromConnect(err), hastore.ErrSessionNotFound) {
				return
			}
			s.c.log.Warn("withdrawing a candidacy; retrying", "election", name, "err", err)
			select {
			case <-s.ctx.Done():
			case <-time.After(backoff):
			}
		}
	}
	// giveUp ends the candidacy this side gives up on: a grant it already
	// got is handed back as an orphan's (the server would otherwise keep
	// it, and answer a later Campaign that it stands); otherwise it is
	// withdrawn, and a grant that comes later is an orphan's anyway.
	giveUp := func() {
		s.mu.Lock()
		if s.candidacies[name] == c {
			delete(s.candidacies, name)
		}
		token := c.token
		if !token.IsZero() && s.orphans[name] == nil {
			done := make(chan struct{})
			s.orphans[name] = done
			go s.resignOrphan(hastore.Fence{Election: name, Token: token}, done)
		}
		s.mu.Unlock()
		if token.IsZero() {
			withdraw()
		}
	}
	public, cluster := splitAddresses(address)
	_, err := s.c.rpc.Campaign(ctx, &hastorev1.CampaignRequest{Election: name, SessionId: s.id, Address: public, ClusterAddress: cluster})
	if err != nil {
		err = fromConnect(err)
		if !errors.Is(err, hastore.ErrCandidacyExists) && !errors.Is(err, hastore.ErrInvalidArgument) && !errors.Is(err, hastore.ErrSessionNotFound) {
			// The server may have accepted the candidacy before the error.
			giveUp()
		} else {
			release()
		}
		return nil, err
	}
	var token election.Token
	select {
	case token = <-c.granted:
	case <-s.ctx.Done():
		release()
		return nil, hastore.ErrSessionNotFound
	case <-ctx.Done():
		giveUp()
		return nil, ctx.Err()
	}
	l, end := hastore.NewLeadership(s.ctx, hastore.Fence{Election: name, Token: token}, s.c, s.ValidUntil)
	var once sync.Once
	endAndRelease := func(cause error) {
		end(cause)
		once.Do(release)
	}
	s.mu.Lock()
	c.end = endAndRelease
	pending := c.revoked
	s.mu.Unlock()
	switch {
	case pending != nil:
		endAndRelease(pending)
	case s.ctx.Err() != nil: // the session ended between the grant and now
		endAndRelease(hastore.ErrSessionEnded)
	}
	return l, nil
}

// localLeadership returns the end function of this client's leadership
// named by f, if any.
func (c *Client) localLeadership(f hastore.Fence) func(cause error) {
	c.mu.Lock()
	s := c.sessions[f.Token.SessionID]
	c.mu.Unlock()
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if cand := s.candidacies[f.Election]; cand != nil && cand.token == f.Token {
		return cand.end
	}
	return nil
}

// Resign implements hastore.Store.
func (c *Client) Resign(ctx context.Context, f hastore.Fence) error {
	if err := hastore.ValidateFence(f); err != nil {
		return err
	}
	if _, err := c.rpc.Resign(ctx, &hastorev1.ResignRequest{Fence: fenceToProto(f)}); err != nil {
		return fromConnect(err)
	}
	if end := c.localLeadership(f); end != nil {
		end(hastore.ErrResigned)
	}
	return nil
}

// ConfirmLeadership implements hastore.Store.
func (c *Client) ConfirmLeadership(ctx context.Context, f hastore.Fence, address string) error {
	public, cluster := splitAddresses(address)
	_, err := c.rpc.ConfirmLeadership(ctx, &hastorev1.ConfirmLeadershipRequest{Fence: fenceToProto(f), Address: public, ClusterAddress: cluster})
	return fromConnect(err)
}

// Leader implements hastore.Store.
func (c *Client) Leader(ctx context.Context, name string) (election.Leader, error) {
	resp, err := c.rpc.GetLeader(ctx, &hastorev1.GetLeaderRequest{Election: name})
	if err != nil {
		return election.Leader{}, fromConnect(err)
	}
	return leaderFromProto(resp.GetLeader()), nil
}

// ObserveLeader implements hastore.Store. A broken stream is reopened;
// the state after reopening is reported only if it differs from the last
// one reported.
func (c *Client) ObserveLeader(ctx context.Context, name string, fn func(election.Leader) error) error {
	if err := hastore.ValidateElection(name); err != nil {
		return err
	}
	var (
		last     election.Leader
		reported bool
	)
	backoff := 50 * time.Millisecond
	for {
		stream, err := c.rpc.ObserveLeader(ctx, &hastorev1.ObserveLeaderRequest{Election: name})
		if err == nil {
			for stream.Receive() {
				msg := stream.Msg()
				if msg.GetLeader() == nil {
					continue // heartbeat
				}
				info := leaderFromProto(msg.GetLeader())
				if reported && info == last {
					continue
				}
				last, reported = info, true
				if err := fn(info); err != nil {
					stream.Close()
					return err
				}
				backoff = 50 * time.Millisecond
			}
			err = stream.Err()
			stream.Close()
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := fromConnect(err); errors.Is(err, hastore.ErrInvalidArgument) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
			backoff = min(2*backoff, time.Second)
		}
	}
}

// PutExecutionPlan implements hastore.Store.
func (c *Client) PutExecutionPlan(ctx context.Context, f hastore.Fence, plan *hastorev1.ExecutionPlan) error {
	_, err := c.rpc.PutExecutionPlan(ctx, &hastorev1.PutExecutionPlanRequest{Fence: fenceToProto(f), Plan: plan})
	return fromConnect(err)
}

// PutExecutionPlanCreated implements hastore.Store: created is the
// answer's; a store before contract 1.2 leaves it false.
func (c *Client) PutExecutionPlanCreated(ctx context.Context, f hastore.Fence, plan *hastorev1.ExecutionPlan) (created bool, err error) {
	resp, err := c.rpc.PutExecutionPlan(ctx, &hastorev1.PutExecutionPlanRequest{Fence: fenceToProto(f), Plan: plan})
	if err != nil {
		return false, fromConnect(err)
	}
	return resp.GetCreated(), nil
}

// GetExecutionPlan implements hastore.Store.
func (c *Client) GetExecutionPlan(ctx context.Context, jobID string) (*hastorev1.ExecutionPlan, error) {
	resp, err := c.rpc.GetExecutionPlan(ctx, &hastorev1.GetExecutionPlanRequest{JobId: jobID})
	if err != nil {
		return nil, fromConnect(err)
	}
	return resp.GetPlan(), nil
}

// ListExecutionPlans implements hastore.Store.
func (c *Client) ListExecutionPlans(ctx context.Context, after string, limit int) ([]string, error) {
	if err := hastore.ValidateList(after, limit); err != nil {
		return nil, err
	}
	var ids []string
	for {
		size := defaultPageSize
		if limit > 0 {
			size = min(size, limit-len(ids))
		}
		resp, err := c.rpc.ListExecutionPlans(ctx, &hastorev1.ListExecutionPlansRequest{PageSize: int32(size), PageToken: after})
		if err != nil {
			return nil, fromConnect(err)
		}
		ids = append(ids, resp.GetJobIds()...)
		after = resp.GetNextPageToken()
		if after == "" || limit > 0 && len(ids) >= limit {
			return ids, nil
		}
	}
}

// DeleteExecutionPlan implements hastore.Store.
func (c *Client) DeleteExecutionPlan(ctx context.Context, f hastore.Fence, jobID string) error {
	_, err := c.rpc.DeleteExecutionPlan(ctx, &hastorev1.DeleteExecutionPlanRequest{Fence: fenceToProto(f), JobId: jobID})
	return fromConnect(err)
}

// RequestCancel implements hastore.Store.
func (c *Client) RequestCancel(ctx context.Context, f hastore.Fence, jobID string, record *jobplanev1.Cancellation) error {
	_, err := c.rpc.RequestJobCancel(ctx, &hastorev1.RequestJobCancelRequest{Fence: fenceToProto(f), JobId: jobID, Cancellation: record})
	return fromConnect(err)
}

// Cancellation implements hastore.Store: GetExecutionPlan says it. A
// store before 1.2 tells no record: a requested cancellation then reads
// as an empty one.
func (c *Client) Cancellation(ctx context.Context, jobID string) (*jobplanev1.Cancellation, error) {
	resp, err := c.rpc.GetExecutionPlan(ctx, &hastorev1.GetExecutionPlanRequest{JobId: jobID})
	if err = fromConnect(err); errors.Is(err, hastore.ErrPlanNotFound) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	if !resp.GetCancelRequested() {
		return nil, nil
	}
	if resp.GetCancellation() == nil {
		return &jobplanev1.Cancellation{}, nil
	}
	return resp.GetCancellation(), nil
}

// CancelRequested implements hastore.Store: GetExecutionPlan says it.
func (c *Client) CancelRequested(ctx context.Context, jobID string) (bool, error) {
	resp, err := c.rpc.GetExecutionPlan(ctx, &hastorev1.GetExecutionPlanRequest{JobId: jobID})
	if err = fromConnect(err); errors.Is(err, hastore.ErrPlanNotFound) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	return resp.GetCancelRequested(), nil
}

// CreateDirtyJobResult implements hastore.Store.
func (c *Client) CreateDirtyJobResult(ctx context.Context, f hastore.Fence, result *jobplanev1.JobResult) error {
	_, err := c.rpc.CreateDirtyJobResult(ctx, &hastorev1.CreateDirtyJobResultRequest{Fence: fenceToProto(f), Result: result})
	return fromConnect(err)
}

// MarkJobResultClean implements hastore.Store.
func (c *Client) MarkJobResultClean(ctx context.Context, f hastore.Fence, jobID string) error {
	_, err := c.rpc.MarkJobResultClean(ctx, &hastorev1.MarkJobResultCleanRequest{Fence: fenceToProto(f), JobId: jobID})
	return fromConnect(err)
}

// GetJobResultEntry implements hastore.Store.
func (c *Client) GetJobResultEntry(ctx context.Context, jobID string) (*hastorev1.JobResultEntry, error) {
	resp, err := c.rpc.GetJobResultEntry(ctx, &hastorev1.GetJobResultEntryRequest{JobId: jobID})
	if err != nil {
		return nil, fromConnect(err)
	}
	return resp.GetEntry(), nil
}

// ListJobResultEntries implements hastore.Store.
func (c *Client) ListJobResultEntries(ctx context.Context, state hastorev1.JobResultState, after string, limit int) ([]*hastorev1.JobResultEntry, error) {
	if err := hastore.ValidateList(after, limit); err != nil {
		return nil, err
	}
	var entries []*hastorev1.JobResultEntry
	for {
		size := defaultPageSize
		if limit > 0 {
			size = min(size, limit-len(entries))
		}
		resp, err := c.rpc.ListJobResultEntries(ctx, &hastorev1.ListJobResultEntriesRequest{PageSize: int32(size), PageToken: after, State: state})
		if err != nil {
			return nil, fromConnect(err)
		}
		entries = append(entries, resp.GetEntries()...)
		after = resp.GetNextPageToken()
		if after == "" || limit > 0 && len(entries) >= limit {
			return entries, nil
		}
	}
}

// DeleteJobResultEntry implements hastore.Store.
func (c *Client) DeleteJobResultEntry(ctx context.Context, f hastore.Fence, jobID string) error {
	_, err := c.rpc.DeleteJobResultEntry(ctx, &hastorev1.DeleteJobResultEntryRequest{Fence: fenceToProto(f), JobId: jobID})
	return fromConnect(err)
}

// AddTaskExecutor implements hastore.Members; a store without the
// membership calls answers hastore.ErrMembersUnsupported.
func (c *Client) AddTaskExecutor(ctx context.Context, f hastore.Fence, id string) error {
	_, err := c.rpc.AddTaskExecutor(ctx, &hastorev1.AddTaskExecutorRequest{Fence: fenceToProto(f), TaskExecutorId: id})
	return membersErr(err)
}

// RemoveTaskExecutor implements hastore.Members.
func (c *Client) RemoveTaskExecutor(ctx context.Context, f hastore.Fence, id string) error {
	_, err := c.rpc.RemoveTaskExecutor(ctx, &hastorev1.RemoveTaskExecutorRequest{Fence: fenceToProto(f), TaskExecutorId: id})
	return membersErr(err)
}

// TaskExecutors implements hastore.Members, a page at a time.
func (c *Client) TaskExecutors(ctx context.Context) ([]string, error) {
	var ids []string
	after := ""
	for {
		resp, err := c.rpc.ListTaskExecutors(ctx, &hastorev1.ListTaskExecutorsRequest{PageSize: defaultPageSize, PageToken: after})
		if err != nil {
			return nil, membersErr(err)
		}
		ids = append(ids, resp.GetTaskExecutorIds()...)
		if after = resp.GetNextPageToken(); after == "" {
			return ids, nil
		}
	}
}

// membersErr is fromConnect, with UNIMPLEMENTED (a store older than the
// membership calls) as hastore.ErrMembersUnsupported.
func membersErr(err error) error {
	if connect.CodeOf(err) == connect.CodeUnimplemented {
		return fmt.Errorf("%w: %v", hastore.ErrMembersUnsupported, err)
	}
	return fromConnect(err)
}

var _ hastore.Checkpoints = (*Client)(nil)

// AddCheckpoint implements hastore.Checkpoints; a store without the
// checkpoint calls answers hastore.ErrCheckpointsUnsupported.
func (c *Client) AddCheckpoint(ctx context.Context, f hastore.Fence, cp *hastorev1.CompletedCheckpoint, retain int) ([]uint64, error) {
	if retain < 0 || retain > hastore.MaxRetainedCheckpoints {
		// Checked here too: the wire's int32 would not carry every int.
		return nil, hastore.ValidateCheckpointWrite(f, cp, retain, 0, 1)
	}
	resp, err := c.rpc.AddCheckpoint(ctx, &hastorev1.AddCheckpointRequest{Fence: fenceToProto(f), Checkpoint: cp, Retain: int32(retain)})
	if err != nil {
		return nil, checkpointsErr(err)
	}
	return resp.GetSubsumedCheckpointIds(), nil
}

// LatestCheckpoint implements hastore.Checkpoints.
func (c *Client) LatestCheckpoint(ctx context.Context, jobID string) (*hastorev1.CompletedCheckpoint, uint64, error) {
	resp, err := c.rpc.GetLatestCheckpoint(ctx, &hastorev1.GetLatestCheckpointRequest{JobId: jobID})
	if err != nil {
		return nil, 0, checkpointsErr(err)
	}
	return resp.GetCheckpoint(), resp.GetLastCheckpointId(), nil
}

// ListCheckpoints implements hastore.Checkpoints, a page at a time.
func (c *Client) ListCheckpoints(ctx context.Context, jobID string, after uint64, limit int) ([]*hastorev1.CompletedCheckpoint, error) {
	if err := hastore.ValidateCheckpointList(jobID, limit); err != nil {
		return nil, err
	}
	var cps []*hastorev1.CompletedCheckpoint
	token := ""
	if after > 0 {
		token = strconv.FormatUint(after, 10)
	}
	for {
		size := maxCheckpointPage
		if limit > 0 {
			size = min(size, limit-len(cps))
		}
		resp, err := c.rpc.ListCheckpoints(ctx, &hastorev1.ListCheckpointsRequest{JobId: jobID, PageSize: int32(size), PageToken: token})
		if err != nil {
			return nil, checkpointsErr(err)
		}
		cps = append(cps, resp.GetCheckpoints()...)
		token = resp.GetNextPageToken()
		if token == "" || limit > 0 && len(cps) >= limit {
			return cps, nil
		}
	}
}

// AddSavepoint implements hastore.Checkpoints.
func (c *Client) AddSavepoint(ctx context.Context, f hastore.Fence, sp *hastorev1.Savepoint) error {
	_, err := c.rpc.AddSavepoint(ctx, &hastorev1.AddSavepointRequest{Fence: fenceToProto(f), Savepoint: sp})
	return checkpointsErr(err)
}

// GetSavepoint implements hastore.Checkpoints.
func (c *Client) GetSavepoint(ctx context.Context, id string) (*hastorev1.Savepoint, error) {
	resp, err := c.rpc.GetSavepoint(ctx, &hastorev1.GetSavepointRequest{SavepointId: id})
	if err != nil {
		return nil, checkpointsErr(err)
	}
	return resp.GetSavepoint(), nil
}

// ListSavepoints implements hastore.Checkpoints, a page at a time.
func (c *Client) ListSavepoints(ctx context.Context, jobID, after string, limit int) ([]*hastorev1.Savepoint, error) {
	if err := hastore.ValidateSavepointList(jobID, after, limit); err != nil {
		return nil, err
	}
	var sps []*hastorev1.Savepoint
	for {
		size := maxCheckpointPage
		if limit > 0 {
			size = min(size, limit-len(sps))
		}
		resp, err := c.rpc.ListSavepoints(ctx, &hastorev1.ListSavepointsRequest{JobId: jobID, PageSize: int32(size), PageToken: after})
		if err != nil {
			return nil, checkpointsErr(err)
		}
		sps = append(sps, resp.GetSavepoints()...)
		after = resp.GetNextPageToken()
		if after == "" || limit > 0 && len(sps) >= limit {
			return sps, nil
		}
	}
}

// DeleteSavepoint implements hastore.Checkpoints.
func (c *Client) DeleteSavepoint(ctx context.Context, f hastore.Fence, id string) error {
	_, err := c.rpc.DeleteSavepoint(ctx, &hastorev1.DeleteSavepointRequest{Fence: fenceToProto(f), SavepointId: id})
	return checkpointsErr(err)
}

// checkpointsErr is fromConnect, with UNIMPLEMENTED (a store older than
// the checkpoint calls) as hastore.ErrCheckpointsUnsupported.
func checkpointsErr(err error) error {
	if connect.CodeOf(err) == connect.CodeUnimplemented {
		return fmt.Errorf("%w: %v", hastore.ErrCheckpointsUnsupported, err)
	}
	return fromConnect(err)
}

// FinishJob implements hastore.Store in steps: HAStoreService has no call
// that records a result and cleans up at once, so it calls
// CreateDirtyJobResult, DeleteExecutionPlan and MarkJobResultClean in turn
// (hastore.FinishJobInSteps).
func (c *Client) FinishJob(ctx context.Context, f hastore.Fence, result *jobplanev1.JobResult) error {
	return hastore.FinishJobInSteps(ctx, c, f, result)
}

package runner

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	"github.com/jobplane/jobplane/gen/jobplane/hastore/v1/hastorev1connect"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/server/hastore"
)

// fault is what the instrumented store does to upcoming calls.
//
// op names the call: one of the store operations the log records
// ("put-plan", "campaign", "keep-alive", ...; see Event.Op), applied
// where the store records it, or an HAStoreService method's name
// ("OpenSession", "Withdraw", "ConfirmLeadership", "Campaign",
// "DeleteJobResultEntry", ...; any unary method), applied to the RPC as
// it arrives, before the store sees it.
type fault struct {
	op, key string        // the call it applies to; key "" is any
	before  error         // fail the call with this, changing nothing
	after   error         // apply the call, then fail it with this
	delay   time.Duration // hold the call this long first
	hold    chan struct{} // hold the call until this is closed
	// giveUp holds the call until the server gives up on it (its context
	// ends), or for upTo if the server waits longer (default 20s); the
	// call is then failed (before) or applied late.
	giveUp bool
	upTo   time.Duration
	// late answers the call with before at once, and applies it this
	// long later: a write the store applied after its caller was told
	// that it failed.
	late time.Duration
	// times is how many calls it applies to: 0 is one, a negative number
	// every one until disarmed. every > 1 applies it to every every-th
	// matching call only (the others pass untouched).
	times, every int
}

// armed is a fault waiting for its calls.
type armed struct {
	fault
	seen, fired int // matching calls so far, and those it applied to
}

// store is the instrumented HA store: a real store (an embedded etcd
// member) that records the server's calls in the log and applies the
// faults a case arms.
type store struct {
	hastore.Store
	log *Log

	mu      sync.Mutex
	faults  []*armed
	watches map[string][]*watchConn // a session's WatchSession streams
	sched   *schedule               // the random fault schedule, while one runs
	peers   map[[2]string]bool      // (session, peer) pairs seen
}

// arm queues a fault for the next matching call.
func (s *store) arm(f fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, &armed{fault: f})
	detail := f.op
	if f.times != 0 || f.every > 1 {
		detail += fmt.Sprintf(" times=%d every=%d", f.times, f.every)
	}
	s.log.Add(Event{Source: "client", Op: "fault", Key: f.key, Detail: detail})
}

// disarm removes the faults armed for op (on key, or any key if key is
// "") that are still waiting.
func (s *store) disarm(op, key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = slices.DeleteFunc(s.faults, func(a *armed) bool { return a.op == op && (key == "" || a.key == key) })
}

// wait holds a call as the fault says, and returns the context to apply
// it with: one that no longer ends, for a call that lands after the
// server gave up on it.
func (f fault) wait(ctx context.Context) context.Context {
	if f.delay > 0 {
		select {
		case <-time.After(f.delay):
		case <-ctx.Done():
		}
	}
	if f.hold != nil {
		select {
		case <-f.hold:
		case <-ctx.Done():
		}
	}
	if f.giveUp {
		upTo := f.upTo
		if upTo <= 0 {
			upTo = 20 * time.Second
		}
		select {
		case <-ctx.Done():
		case <-time.After(upTo):
		}
		if f.before == nil {
			return context.WithoutCancel(ctx) // it lands late
		}
	}
	return ctx
}

// take returns the fault that applies to this call of op on key, if
// one does, and counts the call against the faults armed for it.
func (s *store) take(op, key string) (fault, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, a := range s.faults {
		if a.op != op || a.key != "" && a.key != key {
			continue
		}
		a.seen++
		if a.every > 1 && a.seen%a.every != 0 {
			continue
		}
		a.fired++
		if a.times >= 0 && a.fired >= max(a.times, 1) {
			s.faults = append(s.faults[:i], s.faults[i+1:]...)
		}
		return a.fault, true
	}
	return fault{}, false
}

// call runs f as op on key, with its fault if one is armed, and records
// it once it returned.
func (s *store) call(ctx context.Context, op, key string, t election.Token, f func(context.Context) error) error {
	return s.record(ctx, Event{Source: "store", Op: op, Key: key, Token: t}, f)
}

// record runs f as the call ev describes, with its fault if one is
// armed, and records ev with the call's outcome once it returned.
func (s *store) record(ctx context.Context, ev Event, f func(context.Context) error) error {
	flt, armed := s.take(ev.Op, ev.Key)
	if armed {
		ctx = flt.wait(ctx)
	}
	var err error
	applied := false
	switch {
	case armed && flt.late > 0:
		err = flt.before
		lctx := context.WithoutCancel(ctx)
		time.AfterFunc(flt.late, func() {
			late := ev
			late.Err = f(lctx)
			late.Applied, late.Detail = late.Err == nil, "applied late"
			s.log.Add(late)
		})
	case armed && flt.before != nil:
		err = flt.before
	default:
		err = f(ctx)
		applied = err == nil
		if err == nil && armed && flt.after != nil {
			err = flt.after
		}
	}
	ev.Err, ev.Applied, ev.Peer = err, applied, peerOf(ctx)
	s.log.Add(ev)
	return err
}

// jobOf returns the job id of a job election, or the election.
func jobOf(election string) string {
	if id, ok := strings.CutPrefix(election, "job/"); ok {
		return id
	}
	return election
}

func (s *store) PutExecutionPlan(ctx context.Context, f hastore.Fence, plan *hastorev1.ExecutionPlan) error {
	return s.call(ctx, "put-plan", plan.GetJobId(), f.Token, func(ctx context.Context) error { return s.Store.PutExecutionPlan(ctx, f, plan) })
}

// PutExecutionPlanCreated is logged and faulted as "put-plan" too: the
// HAStoreService handler that the server under test reaches puts every
// plan with it.
func (s *store) PutExecutionPlanCreated(ctx context.Context, f hastore.Fence, plan *hastorev1.ExecutionPlan) (created bool, err error) {
	err = s.call(ctx, "put-plan", plan.GetJobId(), f.Token, func(ctx context.Context) error {
		var err error
		created, err = s.Store.PutExecutionPlanCreated(ctx, f, plan)
		return err
	})
	return created, err
}

func (s *store) DeleteExecutionPlan(ctx context.Context, f hastore.Fence, jobID string) error {
	return s.call(ctx, "delete-plan", jobID, f.Token, func(ctx context.Context) error { return s.Store.DeleteExecutionPlan(ctx, f, jobID) })
}

func (s *store) RequestCancel(ctx context.Context, f hastore.Fence, jobID string, c *jobplanev1.Cancellation) error {
	return s.call(ctx, "request-cancel", jobID, f.Token, func(ctx context.Context) error { return s.Store.RequestCancel(ctx, f, jobID, c) })
}

func (s *store) CreateDirtyJobResult(ctx context.Context, f hastore.Fence, res *jobplanev1.JobResult) error {
	// Recorded with the result's status: a job ends with one.
	ev := Event{Source: "store", Op: "create-dirty", Key: res.GetJobId(), Token: f.Token, Status: res.GetStatus()}
	return s.record(ctx, ev, func(ctx context.Context) error { return s.Store.CreateDirtyJobResult(ctx, f, res) })
}

func (s *store) MarkJobResultClean(ctx context.Context, f hastore.Fence, jobID string) error {
	return s.call(ctx, "mark-clean", jobID, f.Token, func(ctx context.Context) error { return s.Store.MarkJobResultClean(ctx, f, jobID) })
}

// FinishJob takes the contract's three steps through the instrumented
// store's own calls, so that each is logged, and faulted, as a call of
// its own: as a server reaching the store over HAStoreService, which has
// no call for the three at once, makes them.
func (s *store) FinishJob(ctx context.Context, f hastore.Fence, res *jobplanev1.JobResult) error {
	return hastore.FinishJobInSteps(ctx, s, f, res)
}

func (s *store) DeleteJobResultEntry(ctx context.Context, f hastore.Fence, jobID string) error {
	return s.call(ctx, "delete-result", jobID, f.Token, func(ctx context.Context) error { return s.Store.DeleteJobResultEntry(ctx, f, jobID) })
}

// AddTaskExecutor, RemoveTaskExecutor and TaskExecutors pass the
// TaskExecutor membership (hastore.Members) through, recorded as
// "add-member", "remove-member" and "list-members" keyed by the
// TaskExecutor's id.
// members is the wrapped store's membership, if it keeps one.
func (s *store) members() (hastore.Members, error) {
	if m, ok := s.Store.(hastore.Members); ok {
		return m, nil
	}
	return nil, hastore.ErrMembersUnsupported
}

func (s *store) AddTaskExecutor(ctx context.Context, f hastore.Fence, id string) error {
	m, err := s.members()
	if err != nil {
		return err
	}
	return s.call(ctx, "add-member", id, f.Token, func(ctx context.Context) error { return m.AddTaskExecutor(ctx, f, id) })
}

func (s *store) RemoveTaskExecutor(ctx context.Context, f hastore.Fence, id string) error {
	m, err := s.members()
	if err != nil {
		return err
	}
	return s.call(ctx, "remove-member", id, f.Token, func(ctx context.Context) error { return m.RemoveTaskExecutor(ctx, f, id) })
}

func (s *store) TaskExecutors(ctx context.Context) (ids []string, err error) {
	m, err := s.members()
	if err != nil {
		return nil, err
	}
	err = s.call(ctx, "list-members", "", election.Token{}, func(ctx context.Context) error {
		ids, err = m.TaskExecutors(ctx)
		return err
	})
	return ids, err
}

// The checkpoint calls pass the store's checkpoints and savepoints
// (hastore.Checkpoints) through, recorded as "add-checkpoint",
// "latest-checkpoint" and "list-checkpoints" keyed by the job, and
// "add-savepoint", "get-savepoint", "list-savepoints" and
// "delete-savepoint" keyed by the savepoint (the listing by its job
// filter).
var _ hastore.Checkpoints = (*store)(nil)

// checkpoints is the wrapped store's checkpoints, if it keeps them.
func (s *store) checkpoints() (hastore.Checkpoints, error) {
	if c, ok := s.Store.(hastore.Checkpoints); ok {
		return c, nil
	}
	return nil, hastore.ErrCheckpointsUnsupported
}

func (s *store) AddCheckpoint(ctx context.Context, f hastore.Fence, cp *hastorev1.CompletedCheckpoint, retain int) (subsumed []uint64, err error) {
	c, err := s.checkpoints()
	if err != nil {
		return nil, err
	}
	err = s.call(ctx, "add-checkpoint", cp.GetJobId(), f.Token, func(ctx context.Context) error {
		subsumed, err = c.AddCheckpoint(ctx, f, cp, retain)
		return err
	})
	return subsumed, err
}

func (s *store) LatestCheckpoint(ctx context.Context, jobID string) (cp *hastorev1.CompletedCheckpoint, last uint64, err error) {
	c, err := s.checkpoints()
	if err != nil {
		return nil, 0, err
	}
	err = s.call(ctx, "latest-checkpoint", jobID, election.Token{}, func(ctx context.Context) error {
		cp, last, err = c.LatestCheckpoint(ctx, jobID)
		return err
	})
	return cp, last, err
}

func (s *store) ListCheckpoints(ctx context.Context, jobID string, after uint64, limit int) (cps []*hastorev1.CompletedCheckpoint, err error) {
	c, err := s.checkpoints()
	if err != nil {
		return nil, err
	}
	err = s.call(ctx, "list-checkpoints", jobID, election.Token{}, func(ctx context.Context) error {
		cps, err = c.ListCheckpoints(ctx, jobID, after, limit)
		return err
	})
	return cps, err
}

func (s *store) AddSavepoint(ctx context.Context, f hastore.Fence, sp *hastorev1.Savepoint) error {
	c, err := s.checkpoints()
	if err != nil {
		return err
	}
	return s.call(ctx, "add-savepoint", sp.GetSavepointId(), f.Token, func(ctx context.Context) error { return c.AddSavepoint(ctx, f, sp) })
}

func (s *store) GetSavepoint(ctx context.Context, id string) (sp *hastorev1.Savepoint, err error) {
	c, err := s.checkpoints()
	if err != nil {
		return nil, err
	}
	err = s.call(ctx, "get-savepoint", id, election.Token{}, func(ctx context.Context) error {
		sp, err = c.GetSavepoint(ctx, id)
		return err
	})
	return sp, err
}

func (s *store) ListSavepoints(ctx context.Context, jobID, after string, limit int) (sps []*hastorev1.Savepoint, err error) {
	c, err := s.checkpoints()
	if err != nil {
		return nil, err
	}
	err = s.call(ctx, "list-savepoints", jobID, election.Token{}, func(ctx context.Context) error {
		sps, err = c.ListSavepoints(ctx, jobID, after, limit)
		return err
	})
	return sps, err
}

func (s *store) DeleteSavepoint(ctx context.Context, f hastore.Fence, id string) error {
	c, err := s.checkpoints()
	if err != nil {
		return err
	}
	return s.call(ctx, "delete-savepoint", id, f.Token, func(ctx context.Context) error { return c.DeleteSavepoint(ctx, f, id) })
}

func (s *store) ConfirmLeadership(ctx context.Context, f hastore.Fence, address string) error {
	return s.call(ctx, "confirm", jobOf(f.Election), f.Token, func(ctx context.Context) error { return s.Store.ConfirmLeadership(ctx, f, address) })
}

func (s *store) Resign(ctx context.Context, f hastore.Fence) error {
	return s.call(ctx, "resign", jobOf(f.Election), f.Token, func(ctx context.Context) error { return s.Store.Resign(ctx, f) })
}

func (s *store) GetExecutionPlan(ctx context.Context, jobID string) (plan *hastorev1.ExecutionPlan, err error) {
	err = s.call(ctx, "get-plan", jobID, election.Token{}, func(ctx context.Context) error {
		plan, err = s.Store.GetExecutionPlan(ctx, jobID)
		return err
	})
	return plan, err
}

func (s *store) ListExecutionPlans(ctx context.Context, after string, limit int) (ids []string, err error) {
	err = s.call(ctx, "list-plans", "", election.Token{}, func(ctx context.Context) error {
		ids, err = s.Store.ListExecutionPlans(ctx, after, limit)
		return err
	})
	return ids, err
}

func (s *store) GetJobResultEntry(ctx context.Context, jobID string) (entry *hastorev1.JobResultEntry, err error) {
	err = s.call(ctx, "get-result", jobID, election.Token{}, func(ctx context.Context) error {
		entry, err = s.Store.GetJobResultEntry(ctx, jobID)
		return err
	})
	return entry, err
}

func (s *store) ListJobResultEntries(ctx context.Context, state hastorev1.JobResultState, after string, limit int) (entries []*hastorev1.JobResultEntry, err error) {
	err = s.call(ctx, "list-results", "", election.Token{}, func(ctx context.Context) error {
		entries, err = s.Store.ListJobResultEntries(ctx, state, after, limit)
		return err
	})
	return entries, err
}

func (s *store) OpenSession(ctx context.Context, cfg hastore.SessionConfig) (hastore.Session, error) {
	// The TTL asked for, which lifecycle/advertised-limits compares with
	// the advertised session_ttl.
	s.log.Add(Event{Source: "store", Op: "open-session", Detail: cfg.TTL.String()})
	sess, err := s.Store.OpenSession(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &session{Session: sess, s: s}, nil
}

type session struct {
	hastore.Session
	s *store
}

func (ss *session) Campaign(ctx context.Context, name, address string) (*hastore.Leadership, error) {
	key := jobOf(name)
	// The campaign as it arrives; its grant (or failure) once it returns.
	ss.s.log.Add(Event{Source: "store", Op: "campaign", Key: key, Detail: "session=" + ss.ID(), Peer: peerOf(ctx)})
	flt, armed := ss.s.take("campaign", key)
	if armed {
		ctx = flt.wait(ctx)
	}
	if armed && flt.before != nil {
		ss.s.log.Add(Event{Source: "store", Op: "granted", Key: key, Err: flt.before})
		return nil, flt.before
	}
	l, err := ss.Session.Campaign(ctx, name, address)
	var t election.Token
	if err == nil {
		t = l.Token()
	}
	// A grant that publishes an address is, for the cases, as a confirm.
	// The grant's event comes after the campaign's, whatever held it.
	ss.s.log.Add(Event{Source: "store", Op: "granted", Key: key, Token: t, Err: err, Applied: err == nil, Detail: addressDetail(address)})
	if err == nil && armed && flt.after != nil {
		return nil, flt.after // granted, but the answer is lost
	}
	return l, err
}

// PutExecutionPlanAndLead puts the plan through the instrumented store and
// enters no candidacy, so that the put is logged and faulted as a plan
// put and the caller's campaign as a campaign: as over HAStoreService,
// which has no call for the two at once.
func (ss *session) PutExecutionPlanAndLead(ctx context.Context, f hastore.Fence, plan *hastorev1.ExecutionPlan, _ string) (*hastore.Leadership, error) {
	return hastore.PutExecutionPlanNoLead(ctx, ss.s, f, plan)
}

// KeepAlive renews the session; a fault armed for "keep-alive" (key: the
// session's id, or any) applies to it.
func (ss *session) KeepAlive(ctx context.Context) (ttl time.Duration, err error) {
	err = ss.s.call(ctx, "keep-alive", ss.ID(), election.Token{}, func(ctx context.Context) error {
		ttl, err = ss.Session.KeepAlive(ctx)
		return err
	})
	return ttl, err
}

// shortPage cuts a listing's page to its first item, with the token of
// the next page: a store may answer fewer items than asked for, and a
// server must page on until the token is empty (so every recovery of
// more than one job pages).
func shortPage(msg any) {
	switch m := msg.(type) {
	case *hastorev1.ListExecutionPlansResponse:
		if len(m.GetJobIds()) > 1 {
			m.JobIds = m.JobIds[:1]
			m.NextPageToken = m.JobIds[0]
		}
	case *hastorev1.ListJobResultEntriesResponse:
		if len(m.GetEntries()) > 1 {
			m.Entries = m.Entries[:1]
			m.NextPageToken = m.Entries[0].GetResult().GetJobId()
		}
	case *hastorev1.ListCheckpointsResponse:
		// The reference handler's token: the last id, in decimal.
		if len(m.GetCheckpoints()) > 1 {
			m.Checkpoints = m.Checkpoints[:1]
			m.NextPageToken = strconv.FormatUint(m.Checkpoints[0].GetCheckpointId(), 10)
		}
	case *hastorev1.ListSavepointsResponse:
		if len(m.GetSavepoints()) > 1 {
			m.Savepoints = m.Savepoints[:1]
			m.NextPageToken = m.Savepoints[0].GetSavepointId()
		}
	}
}

// interceptor is the store's RPC-level instrumentation. For every call
// it notes where the call came from (the peer, for writes-by-the-leader)
// and which sessions were used from there; it applies a fault armed for
// the call's method (see fault), or one the random schedule draws; it
// loses the answer of a Campaign call that a fault armed for
// "campaign-answer" (key: the job, or the election) matches (the
// candidacy is entered, and the server is answered UNAVAILABLE, as if
// the answer were lost on the way); it cuts a session's WatchSession
// streams (cutWatches), holds a reconnecting one where a fault armed for
// "watch-session" (key: the session) says, and records what they report;
// and it answers listings a page of one at a time.
type interceptor struct{ s *store }

func (s *store) interceptor() connect.Interceptor { return interceptor{s} }

func (i interceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	s := i.s
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		peer := req.Peer().Addr
		ctx = withPeer(ctx, peer)
		if id := sessionOf(req.Any()); id != "" {
			s.sawSession(id, peer)
		}
		method, key := path.Base(req.Spec().Procedure), rpcKey(req.Any())
		flt, armed := s.take(method, key)
		if !armed {
			flt, armed = s.drawFault(method, key)
		}
		if armed {
			ctx = flt.wait(ctx)
			if flt.before != nil {
				s.log.Add(Event{Source: "store", Op: "rpc-fault", Key: key, Err: flt.before, Detail: method + " failed", Peer: peer})
				return nil, connect.NewError(connect.CodeUnavailable, flt.before)
			}
		}
		m, isCampaign := req.Any().(*hastorev1.CampaignRequest)
		var answerLost fault
		var lost bool
		if isCampaign {
			answerLost, lost = s.take("campaign-answer", jobOf(m.GetElection()))
		}
		resp, err := next(ctx, req)
		switch {
		case err != nil:
			return resp, err
		case lost:
			s.log.Add(Event{Source: "store", Op: "campaign-answer", Key: jobOf(m.GetElection()), Err: answerLost.after, Applied: true})
			return nil, connect.NewError(connect.CodeUnavailable, answerLost.after)
		case armed && flt.after != nil:
			s.log.Add(Event{Source: "store", Op: "rpc-fault", Key: key, Err: flt.after, Applied: true, Detail: method + " answer lost", Peer: peer})
			return nil, connect.NewError(connect.CodeUnavailable, flt.after)
		}
		if open, ok := resp.Any().(*hastorev1.OpenSessionResponse); ok {
			s.sawSession(open.GetSessionId(), peer)
		}
		shortPage(resp.Any())
		return resp, nil
	}
}

func (interceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (i interceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		peer := conn.Peer().Addr
		ctx = withPeer(ctx, peer)
		method := path.Base(conn.Spec().Procedure)
		if flt, armed := i.s.drawFault(method, ""); armed && flt.before != nil {
			// A stream refused as it starts: the client reconnects.
			i.s.log.Add(Event{Source: "store", Op: "rpc-fault", Err: flt.before, Detail: method + " failed", Peer: peer})
			return connect.NewError(connect.CodeUnavailable, flt.before)
		}
		if conn.Spec().Procedure != hastorev1connect.HAStoreServiceWatchSessionProcedure {
			return next(ctx, conn)
		}
		ctx, cancel := context.WithCancel(ctx)
		w := &watchConn{StreamingHandlerConn: conn, s: i.s, ctx: ctx, cancel: cancel, done: make(chan struct{}), peer: peer}
		defer close(w.done)
		defer cancel()
		return next(ctx, w)
	}
}

// watchConn is a WatchSession stream: once its request names the
// session, the stream can be cut, and its start held. What it reports is
// recorded: each snapshot, as "watch-snapshot" keyed by the session with
// the leaderships it lists (election=token, in Detail), and each ended
// leadership, as "reported-revoked" keyed by the job (or election) with
// its token, before the message leaves.
type watchConn struct {
	connect.StreamingHandlerConn
	s      *store
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // closed once the stream's handler returned
	peer   string

	session  string
	snapshot []string // the leaderships the snapshot listed so far
	snapDone bool
}

func (w *watchConn) Receive(msg any) error {
	if err := w.StreamingHandlerConn.Receive(msg); err != nil {
		return err
	}
	id := msg.(*hastorev1.WatchSessionRequest).GetSessionId()
	w.session = id
	w.s.sawSession(id, w.peer)
	w.s.log.Add(Event{Source: "store", Op: "watch-session", Key: id})
	if flt, armed := w.s.take("watch-session", id); armed {
		flt.wait(w.ctx)
	}
	w.s.mu.Lock()
	w.s.watches[id] = append(w.s.watches[id], w)
	w.s.mu.Unlock()
	return nil
}

func (w *watchConn) Send(msg any) error {
	if m, ok := msg.(*hastorev1.WatchSessionResponse); ok {
		switch {
		case m.GetGranted() != nil && !w.snapDone:
			g := m.GetGranted()
			w.snapshot = append(w.snapshot, g.GetElection()+"="+token(g.GetToken()).String())
		case m.GetSnapshotEnd() != nil:
			w.snapDone = true
			w.s.log.Add(Event{Source: "store", Op: "watch-snapshot", Key: w.session, Detail: strings.Join(w.snapshot, " ")})
		case m.GetRevoked() != nil:
			r := m.GetRevoked()
			w.s.log.Add(Event{Source: "store", Op: "reported-revoked", Key: jobOf(r.GetElection()), Token: token(r.GetToken()), Detail: "session=" + w.session})
		}
	}
	return w.StreamingHandlerConn.Send(msg)
}

// cutWatches ends every WatchSession stream of the session, and waits
// until their handlers returned: nothing more reaches the client on them.
// The client reconnects.
func (s *store) cutWatches(id string) {
	s.mu.Lock()
	cuts := s.watches[id]
	delete(s.watches, id)
	s.mu.Unlock()
	for _, w := range cuts {
		w.cancel()
		select {
		case <-w.done:
		case <-time.After(5 * time.Second):
		}
	}
	s.log.Add(Event{Source: "client", Op: "cut-watch", Key: id})
}

// addressDetail is the Detail of an event that publishes address.
func addressDetail(address string) string {
	if address == "" {
		return ""
	}
	return "address=" + address
}

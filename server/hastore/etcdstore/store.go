package etcdstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/internal/telemetry"
)

// DefaultPrefix is the default key prefix of the etcd backend.
const DefaultPrefix = "/jobplane/"

// Config configures the etcd backend.
type Config struct {
	// Client is the etcd client to use; the store does not close it.
	// Required.
	Client *clientv3.Client
	// Prefix is prepended to every key, so several clusters can share one
	// etcd. It must end in "/". Default: DefaultPrefix.
	Prefix string
	// MaxPlanBytes limits an encoded execution plan. It must stay below the
	// etcd server's request limit (1.5 MiB by default; the embedded member
	// raises it to fit). Default: hastore.DefaultMaxPlanBytes.
	MaxPlanBytes int
	// MaxTxnOps is the etcd server's limit on the operations of one
	// transaction level (its --max-txn-ops); the store never sends a
	// batch of writes past it. Default: DefaultMaxTxnOps, etcd's default.
	MaxTxnOps int
	// MaxRequestBytes is the etcd server's request size limit (its
	// --max-request-bytes); the store keeps every batch of writes well
	// below it, and below the client's own 2 MiB. Default:
	// DefaultMaxRequestBytes, etcd's default.
	MaxRequestBytes int
	// Logger receives the backend's logs. Default: slog.Default().
	Logger *slog.Logger
}

// Validate reports whether the configuration can be used.
func (c Config) Validate() error {
	if c.Client == nil {
		return errors.New("hastore: etcd client is required")
	}
	if c.Prefix != "" && !strings.HasSuffix(c.Prefix, "/") {
		return fmt.Errorf("hastore: prefix %q must end in /", c.Prefix)
	}
	if c.MaxPlanBytes < 0 || c.MaxTxnOps < 0 || c.MaxRequestBytes < 0 {
		return errors.New("hastore: plan and request limits must not be negative")
	}
	return nil
}

// Store is the hastore.Store on etcd. Elections follow etcd's election recipe, one
// lease per session; fenced writes are transactions that compare the
// writer's leader key within the write, and reach etcd through one group
// committer, which sends writes that queue while a transaction is in flight
// together as the next one (see committer). See the package documentation
// for the key layout.
type Store struct {
	client  *clientv3.Client
	prefix  string
	maxPlan int
	log     *slog.Logger
	commit  *committer
	gone    *leaderKeys // ends leaderships whose key is deleted

	mu      sync.Mutex
	leaders map[hastore.Fence]*localLeader // leaderships held through this store
	manual  map[*etcdSession]struct{}      // sessions with an expiry timer

	own *ownSessions // of a store on an embedded member: SessionsFileName

	closers []func() error // what Open started, closed in order by Close

	// jobManagerLed is signaled (without blocking) when a leadership of
	// the election "jobmanager" is granted through this store.
	jobManagerLed chan struct{}
}

// localLeader is the store's handle on a leadership it granted.
type localLeader struct {
	end       func(cause error)
	resigning atomic.Bool
}

var _ hastore.Store = (*Store)(nil)

// New returns a hastore.Store on the etcd reached by cfg.Client.
func New(cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if cfg.MaxPlanBytes == 0 {
		cfg.MaxPlanBytes = hastore.DefaultMaxPlanBytes
	}
	if cfg.MaxTxnOps == 0 {
		cfg.MaxTxnOps = DefaultMaxTxnOps
	}
	if cfg.MaxRequestBytes == 0 {
		cfg.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Store{
		client:        cfg.Client,
		prefix:        cfg.Prefix,
		maxPlan:       cfg.MaxPlanBytes,
		log:           cfg.Logger,
		commit:        newCommitter(cfg.Client, cfg.MaxTxnOps, cfg.MaxRequestBytes),
		leaders:       make(map[hastore.Fence]*localLeader),
		jobManagerLed: make(chan struct{}, 1),
		manual:        make(map[*etcdSession]struct{}),
	}
	s.gone = newLeaderKeys(s)
	return s, nil
}

// Close implements hastore.Store. Writes still waiting or in flight fail with
// hastore.ErrUnavailable, and so do writes made after Close. A store made by
// New leaves its client open; one made by Open closes its client and
// embedded member. Sessions opened from the store end when their client
// closes or their TTL passes.
func (s *Store) Close() error {
	s.commit.close()
	s.gone.close()
	// Expiry timers must not fire into a closed client; the leases of
	// these sessions expire by their TTL instead.
	s.mu.Lock()
	manual := s.manual
	s.manual = make(map[*etcdSession]struct{})
	s.mu.Unlock()
	for sess := range manual {
		sess.mu.Lock()
		sess.closed = true
		sess.expiry.Stop()
		sess.mu.Unlock()
	}
	var errs []error
	for _, c := range s.closers {
		errs = append(errs, c())
	}
	s.closers = nil
	return errors.Join(errs...)
}

// Client returns the etcd client the store uses, for tools and
// measurements that need raw etcd access beside the store.
func (s *Store) Client() *clientv3.Client { return s.client }

// Key layout, under the prefix.
func (s *Store) electionPrefix(election string) string { return s.prefix + "elections/" + election }
func (s *Store) leaderKey(election, sessionID string) string {
	return s.electionPrefix(election) + "/" + sessionID
}
func (s *Store) planPrefix() string            { return s.prefix + "plans/" }
func (s *Store) planKey(jobID string) string   { return s.planPrefix() + jobID }
func (s *Store) resultPrefix() string          { return s.prefix + "results/" }
func (s *Store) resultKey(jobID string) string { return s.resultPrefix() + jobID }
func (s *Store) cancelKey(jobID string) string { return s.prefix + "cancels/" + jobID }

// unavailable wraps a backend failure, leaving the caller's own context
// errors, and errors that already say so, as they are. A call whose ctx
// ended fails with ctx's error: an in-process client of an embedded member
// returns etcd's own timeout or cancellation error then, not ctx's.
func unavailable(ctx context.Context, err error) error {
	if ctx.Err() != nil && !errors.Is(err, hastore.ErrUnavailable) {
		return ctx.Err()
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, hastore.ErrUnavailable) {
		return err
	}
	return fmt.Errorf("%w: %v", hastore.ErrUnavailable, err)
}

// fenceCmps are the comparisons that make a transaction fenced by f: the
// writer's leader key exists with the token's epoch as its create revision,
// and no key of the election is older, so the writer is the leader.
func (s *Store) fenceCmps(f hastore.Fence) []clientv3.Cmp {
	epoch := int64(min(f.Token.Epoch, math.MaxInt64))
	return []clientv3.Cmp{
		clientv3.Compare(clientv3.CreateRevision(s.leaderKey(f.Election, f.Token.SessionID)), "=", epoch),
		clientv3.Compare(clientv3.CreateRevision(s.electionPrefix(f.Election)+"/").WithPrefix(), ">", epoch-1),
	}
}

// fenced runs ops in one transaction fenced by f, through the committer.
func (s *Store) fenced(ctx context.Context, f hastore.Fence, ops ...clientv3.Op) (*pb.TxnResponse, error) {
	return s.fencedClaiming(ctx, f, nil, ops...)
}

// fencedClaiming is fenced, with claims passed to the committer: keys (or
// deleted prefixes) that no other write of the same batch may claim.
func (s *Store) fencedClaiming(ctx context.Context, f hastore.Fence, claims []string, ops ...clientv3.Op) (*pb.TxnResponse, error) {
	resp, _, err := s.commit.do(ctx, clientv3.OpTxn(s.fenceCmps(f), ops, nil), claims...)
	if err != nil {
		return nil, unavailable(ctx, err)
	}
	if !resp.Succeeded {
		telemetry.FencingRejected(ctx, "HAStore")
		return nil, hastore.ErrStaleToken
	}
	return resp, nil
}

// fencedCAS runs ops fenced by f and only if key's mod revision is still
// modRev (0: the key is absent). conflict reports that key changed.
func (s *Store) fencedCAS(ctx context.Context, f hastore.Fence, key string, modRev int64, ops ...clientv3.Op) (conflict bool, err error) {
	inner := clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", modRev)}, ops, nil)
	resp, err := s.fenced(ctx, f, inner)
	if err != nil {
		return false, err
	}
	return !resp.Responses[0].GetResponseTxn().GetSucceeded(), nil
}

// Resign implements hastore.Store.
func (s *Store) Resign(ctx context.Context, f hastore.Fence) error {
	if err := hastore.ValidateFence(f); err != nil {
		return err
	}
	s.mu.Lock()
	ll := s.leaders[f]
	s.mu.Unlock()
	if ll != nil {
		ll.resigning.Store(true)
	}
	key := s.leaderKey(f.Election, f.Token.SessionID)
	epoch := int64(min(f.Token.Epoch, math.MaxInt64))
	_, _, err := s.commit.do(ctx, clientv3.OpTxn(
		[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", epoch)},
		[]clientv3.Op{clientv3.OpDelete(key)}, nil))
	if err != nil {
		if ll != nil {
			ll.resigning.Store(false)
		}
		return unavailable(ctx, err)
	}
	if ll != nil {
		ll.end(hastore.ErrResigned)
	}
	return nil
}

// ConfirmLeadership implements hastore.Store.
func (s *Store) ConfirmLeadership(ctx context.Context, f hastore.Fence, address string) error {
	if err := hastore.ValidateConfirm(f, address); err != nil {
		return err
	}
	_, err := s.fenced(ctx, f, clientv3.OpPut(s.leaderKey(f.Election, f.Token.SessionID), address, clientv3.WithIgnoreLease()))
	return err
}

// Leader implements hastore.Store.
func (s *Store) Leader(ctx context.Context, name string) (election.Leader, error) {
	if err := hastore.ValidateElection(name); err != nil {
		return election.Leader{}, err
	}
	resp, err := s.client.Get(ctx, s.electionPrefix(name)+"/", clientv3.WithFirstCreate()...)
	if err != nil {
		return election.Leader{}, unavailable(ctx, err)
	}
	info := election.Leader{Election: name}
	if len(resp.Kvs) > 0 {
		kv := resp.Kvs[0]
		info.Address, info.ClusterAddress = election.SplitAddresses(string(kv.Value))
		info.Token = election.Token{SessionID: s.sessionOfKey(name, string(kv.Key)), Epoch: uint64(kv.CreateRevision)}
	}
	return info, nil
}

// Candidates implements hastore.CandidateCounter: every campaign of the
// election holds one key under its prefix, bound to its session's lease,
// until it resigns or its session ends. The count is the member's own
// (a serializable read): it needs no quorum, so it answers at once
// whatever the cluster's state, and may lag the cluster by a moment.
func (s *Store) Candidates(ctx context.Context, name string) (int, error) {
	if err := hastore.ValidateElection(name); err != nil {
		return 0, err
	}
	resp, err := s.client.Get(ctx, s.electionPrefix(name)+"/", clientv3.WithPrefix(), clientv3.WithCountOnly(), clientv3.WithSerializable())
	if err != nil {
		return 0, unavailable(ctx, err)
	}
	return int(resp.Count), nil
}

func (s *Store) sessionOfKey(election, key string) string {
	return strings.TrimPrefix(key, s.electionPrefix(election)+"/")
}

// candidate is one key of an election, as ObserveLeader tracks it.
type candidate struct {
	createRev int64
	value     string
}

// ObserveLeader implements hastore.Store. It tracks every candidate key of the
// election from one consistent read and the watch events after it, so it
// reports each change of leader in order. If the watch breaks (for example
// after a compaction), it re-reads the election and reports the state from
// there on.
func (s *Store) ObserveLeader(ctx context.Context, name string, fn func(election.Leader) error) error {
	if err := hastore.ValidateElection(name); err != nil {
		return err
	}
	// A member cut off from its cluster's majority fails the reads and
	// ends the watch ("no leader") instead of going silent.
	ctx = clientv3.WithRequireLeader(ctx)
	pfx := s.electionPrefix(name) + "/"
	var last election.Leader
	first := true
	emit := func(cands map[string]candidate) error {
		info := election.Leader{Election: name}
		var best int64
		for key, c := range cands {
			if best == 0 || c.createRev < best {
				best = c.createRev
				info.Address, info.ClusterAddress = election.SplitAddresses(c.value)
				info.Token = election.Token{SessionID: strings.TrimPrefix(key, pfx), Epoch: uint64(c.createRev)}
			}
		}
		if !first && info == last {
			return nil
		}
		first, last = false, info
		return fn(info)
	}
	for {
		resp, err := s.client.Get(ctx, pfx, clientv3.WithPrefix())
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return unavailable(ctx, err)
		}
		cands := make(map[string]candidate, len(resp.Kvs))
		for _, kv := range resp.Kvs {
			cands[string(kv.Key)] = candidate{kv.CreateRevision, string(kv.Value)}
		}
		if err := emit(cands); err != nil {
			return err
		}
		wctx, cancel := context.WithCancel(ctx)
		for wresp := range s.client.Watch(wctx, pfx, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1)) {
			if wresp.Err() != nil {
				break
			}
			for _, ev := range wresp.Events {
				key := string(ev.Kv.Key)
				if ev.Type == clientv3.EventTypeDelete {
					delete(cands, key)
				} else {
					cands[key] = candidate{ev.Kv.CreateRevision, string(ev.Kv.Value)}
				}
				if err := emit(cands); err != nil {
					cancel()
					return err
				}
			}
		}
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// planPut validates and encodes plan, and returns the op that creates it,
// with extra in the same branch, if the job has neither a result nor a
// plan: a job with a result never runs again, and a plan is never
// replaced. planOutcome reads the op's response.
func (s *Store) planPut(f hastore.Fence, plan *hastorev1.ExecutionPlan, extra ...clientv3.Op) (clientv3.Op, error) {
	data, err := hastore.Canonical(plan)
	if err != nil {
		return clientv3.Op{}, fmt.Errorf("hastore: encode plan: %w", err)
	}
	if err := hastore.ValidatePlanWrite(f, plan, len(data), s.maxPlan); err != nil {
		return clientv3.Op{}, err
	}
	key := s.planKey(plan.GetJobId())
	create := clientv3.OpTxn(
		[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", 0)},
		append([]clientv3.Op{clientv3.OpPut(key, string(data))}, extra...),
		[]clientv3.Op{clientv3.OpGet(key)})
	return clientv3.OpTxn(
		[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(s.resultKey(plan.GetJobId())), "=", 0)},
		[]clientv3.Op{create}, nil), nil
}

// planOutcome reads the response of planPut's op: created, with the
// responses of the ops that ran (the put, then extra's); or not, with nil
// if the stored plan equals plan (a repeated put), hastore.ErrPlanExists if it
// does not, and hastore.ErrResultExists if the job has a result.
func planOutcome(resp *pb.ResponseOp, plan *hastorev1.ExecutionPlan) (created []*pb.ResponseOp, err error) {
	outer := resp.GetResponseTxn()
	if !outer.GetSucceeded() {
		return nil, hastore.ErrResultExists
	}
	inner := outer.GetResponses()[0].GetResponseTxn()
	if inner.GetSucceeded() {
		return inner.GetResponses(), nil
	}
	kvs := inner.GetResponses()[0].GetResponseRange().GetKvs()
	if len(kvs) == 0 {
		return nil, hastore.ErrPlanExists // removed in the same transaction; cannot be told apart
	}
	stored, err := decodePlan(plan.GetJobId(), kvs[0].Value)
	if err != nil {
		return nil, err
	}
	if !hastore.Same(stored, plan) {
		return nil, hastore.ErrPlanExists
	}
	return nil, nil
}

// PutExecutionPlan implements hastore.Store.
func (s *Store) PutExecutionPlan(ctx context.Context, f hastore.Fence, plan *hastorev1.ExecutionPlan) error {
	_, err := s.PutExecutionPlanCreated(ctx, f, plan)
	return err
}

// PutExecutionPlanCreated implements hastore.Store: created is whether the
// transaction's comparison of the plan key's create revision chose the
// branch that puts it, so two puts never both report it.
func (s *Store) PutExecutionPlanCreated(ctx context.Context, f hastore.Fence, plan *hastorev1.ExecutionPlan) (created bool, err error) {
	put, err := s.planPut(f, plan)
	if err != nil {
		return false, err
	}
	resp, err := s.fenced(ctx, f, put)
	if err != nil {
		return false, err
	}
	ran, err := planOutcome(resp.Responses[0], plan)
	return err == nil && ran != nil, err
}

// GetExecutionPlan implements hastore.Store.
func (s *Store) GetExecutionPlan(ctx context.Context, jobID string) (*hastorev1.ExecutionPlan, error) {
	if err := hastore.ValidateJobID(jobID); err != nil {
		return nil, err
	}
	resp, err := s.client.Get(ctx, s.planKey(jobID))
	if err != nil {
		return nil, unavailable(ctx, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, hastore.ErrPlanNotFound
	}
	return decodePlan(jobID, resp.Kvs[0].Value)
}

// ListExecutionPlans implements hastore.Store.
func (s *Store) ListExecutionPlans(ctx context.Context, after string, limit int) ([]string, error) {
	if err := hastore.ValidateList(after, limit); err != nil {
		return nil, err
	}
	var ids []string
	err := s.scan(ctx, s.planPrefix(), after, true, func(key string, _ []byte) bool {
		ids = append(ids, key)
		return limit == 0 || len(ids) < limit
	})
	return ids, err
}

// planBatch is the plans the first read of ScanExecutionPlans returns,
// and planBatchMax the most a later one does: most plans are a few hundred
// bytes, and even 64 at the graph limit (about 1 MiB each) make a response
// etcd's client takes; batches grow while they stay small (scanAt).
const planBatch, planBatchMax = 64, 1024

var _ hastore.PlanScanner = (*Store)(nil)

// ScanExecutionPlans implements hastore.PlanScanner: the page's plans in
// batches of one revision, then the cancel requests between its first and
// last job in one range read at that revision.
func (s *Store) ScanExecutionPlans(ctx context.Context, after string, limit int) ([]hastore.StoredPlan, error) {
	if err := hastore.ValidateList(after, limit); err != nil {
		return nil, err
	}
	var (
		out    []hastore.StoredPlan
		decode error
	)
	rev, err := s.scanAt(ctx, s.planPrefix(), after, false, planBatch, planBatchMax, func(key string, value []byte) bool {
		plan, err := decodePlan(key, value)
		if err != nil {
			decode = err
			return false
		}
		out = append(out, hastore.StoredPlan{Plan: plan})
		return limit == 0 || len(out) < limit
	})
	switch {
	case err != nil:
		return nil, err
	case decode != nil:
		return nil, decode
	case len(out) == 0:
		return nil, nil
	}
	first, last := out[0].Plan.GetJobId(), out[len(out)-1].Plan.GetJobId()
	resp, err := s.client.Get(ctx, s.cancelKey(first), clientv3.WithRange(s.cancelKey(last)+"\x00"), clientv3.WithRev(rev))
	if err != nil {
		return nil, unavailable(ctx, err)
	}
	cancels := make(map[string]*jobplanev1.Cancellation, len(resp.Kvs))
	pfx := s.cancelKey("")
	for _, kv := range resp.Kvs {
		id := strings.TrimPrefix(string(kv.Key), pfx)
		c, err := decodeCancellation(id, kv.Value)
		if err != nil {
			return nil, err
		}
		cancels[id] = c
	}
	for i := range out {
		out[i].Cancellation = cancels[out[i].Plan.GetJobId()]
	}
	return out, nil
}

var _ hastore.PlanReader = (*Store)(nil)

// Bounds of ReadExecutionPlans: the jobs read by one transaction (two
// gets each, within the member's max-txn-ops), and the transactions in
// flight at once.
const (
	planReadJobs      = DefaultMaxTxnOps / 2
	planReadsInFlight = 8
)

// ReadExecutionPlans implements hastore.PlanReader: one read-only
// transaction per planReadJobs jobs (its plan and its cancel request),
// planReadsInFlight at a time.
func (s *Store) ReadExecutionPlans(ctx context.Context, ids []string) ([]hastore.StoredPlan, error) {
	for _, id := range ids {
		if err := hastore.ValidateJobID(id); err != nil {
			return nil, err
		}
	}
	var (
		mu    sync.Mutex
		out   []hastore.StoredPlan
		first error
		wg    sync.WaitGroup
		sem   = make(chan struct{}, planReadsInFlight)
	)
	for lo := 0; lo < len(ids); lo += planReadJobs {
		chunk := ids[lo:min(lo+planReadJobs, len(ids))]
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			got, err := s.readPlans(ctx, chunk)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				first = cmp.Or(first, err)
				return
			}
			out = append(out, got...)
		})
	}
	wg.Wait()
	if first != nil {
		return nil, first
	}
	return out, nil
}

// readPlans reads the plans and cancel requests of ids in one read-only
// transaction.
func (s *Store) readPlans(ctx context.Context, ids []string) ([]hastore.StoredPlan, error) {
	ops := make([]clientv3.Op, 0, 2*len(ids))
	for _, id := range ids {
		ops = append(ops, clientv3.OpGet(s.planKey(id)), clientv3.OpGet(s.cancelKey(id)))
	}
	resp, err := s.client.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return nil, unavailable(ctx, err)
	}
	var out []hastore.StoredPlan
	for i, id := range ids {
		plans, cancels := resp.Responses[2*i].GetResponseRange(), resp.Responses[2*i+1].GetResponseRange()
		if len(plans.GetKvs()) == 0 {
			continue
		}
		var sp hastore.StoredPlan
		if sp.Plan, err = decodePlan(id, plans.GetKvs()[0].Value); err != nil {
			return nil, err
		}
		if kvs := cancels.GetKvs(); len(kvs) > 0 {
			if sp.Cancellation, err = decodeCancellation(id, kvs[0].Value); err != nil {
				return nil, err
			}
		}
		out = append(out, sp)
	}
	return out, nil
}

// scan calls fn with each key (stripped of pfx) and value under pfx after
// the key `after`, in key order, until fn returns false.
func (s *Store) scan(ctx context.Context, pfx, after string, keysOnly bool, fn func(key string, value []byte) bool) error {
	return s.scanBatches(ctx, pfx, after, keysOnly, 500, fn)
}

// scanBatches is scan, reading batch keys at a time. Every batch after the
// first reads at the first one's revision, so that one scan (one page of
// a listing) is a snapshot of one moment, however many batches it takes:
// the contract's listings never show a state that never existed.
func (s *Store) scanBatches(ctx context.Context, pfx, after string, keysOnly bool, batch int64, fn func(key string, value []byte) bool) error {
	_, err := s.scanAt(ctx, pfx, after, keysOnly, batch, batch, fn)
	return err
}

// scanAt is scanBatches, returning the revision the scan read at. A batch
// whose values came to under growBytes is followed by one twice as large,
// up to maxBatch: a store busy with writes answers each read slowly,
// whatever its size, so that small values are best read many at a time,
// while large ones must not make one response huge.
func (s *Store) scanAt(ctx context.Context, pfx, after string, keysOnly bool, batch, maxBatch int64, fn func(key string, value []byte) bool) (int64, error) {
	end := clientv3.GetPrefixRangeEnd(pfx)
	from := pfx
	if after != "" {
		from = pfx + after + "\x00"
	}
	var rev int64
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(batch)}
		if keysOnly {
			opts = append(opts, clientv3.WithKeysOnly())
		}
		if rev != 0 {
			// Every batch after the first reads the first one's revision,
			// which that (linearizable) read made sure of: a serializable
			// read of it is the same snapshot, and needs no round of the
			// cluster, which a member busy with writes makes slow. A
			// member that has not applied the revision yet says so, and
			// the batch is read linearizably.
			opts = append(opts, clientv3.WithRev(rev))
		}
		read := opts
		if rev != 0 {
			read = append(opts[:len(opts):len(opts)], clientv3.WithSerializable())
		}
		resp, err := s.client.Get(ctx, from, read...)
		if rev != 0 && errors.Is(err, rpctypes.ErrFutureRev) {
			resp, err = s.client.Get(ctx, from, opts...)
		}
		if err != nil {
			// A compaction past rev between two batches (compactions
			// keep far more than a scan takes) fails the scan as
			// unavailable: the caller retries it.
			return 0, unavailable(ctx, err)
		}
		// The first batch's revision is the scan's. (A response's
		// revision is the store's as it answered, not the one read: later
		// batches must not take it.)
		if rev == 0 {
			rev = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			if !fn(strings.TrimPrefix(string(kv.Key), pfx), kv.Value) {
				return rev, nil
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return rev, nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
		size := 0
		for _, kv := range resp.Kvs {
			size += len(kv.Value)
		}
		if size < growBytes {
			batch = min(2*batch, maxBatch)
		}
	}
}

// growBytes is the size of a scan's batch under which the next batch
// doubles (scanAt).
const growBytes = 4 << 20

// DeleteExecutionPlan implements hastore.Store: the plan goes only if the job has
// a result entry, checked in the transaction that deletes it.
func (s *Store) DeleteExecutionPlan(ctx context.Context, f hastore.Fence, jobID string) error {
	if err := hastore.ValidateJobWrite(f, jobID); err != nil {
		return err
	}
	resp, err := s.fenced(ctx, f, clientv3.OpTxn(
		[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(s.resultKey(jobID)), ">", 0)},
		s.planDeletes(jobID), nil))
	if err != nil {
		return err
	}
	if !resp.Responses[0].GetResponseTxn().GetSucceeded() {
		return hastore.ErrResultNotFound
	}
	return nil
}

// planDeletes are the ops that remove a job's plan, its cancel request,
// and its checkpoints with its last checkpoint id.
func (s *Store) planDeletes(jobID string) []clientv3.Op {
	return []clientv3.Op{
		clientv3.OpDelete(s.planKey(jobID)),
		clientv3.OpDelete(s.cancelKey(jobID)),
		clientv3.OpDelete(s.checkpointPrefix(jobID), clientv3.WithPrefix()),
	}
}

// RequestCancel implements hastore.Store: the request is put only if the job has
// no result and its plan exists, both checked in the transaction that
// puts it; if it has a result, the transaction reads it instead.
//
// The request's record is the key's value, put only if the key is absent
// (in the same transaction), so the first request's is kept.
func (s *Store) RequestCancel(ctx context.Context, f hastore.Fence, jobID string, c *jobplanev1.Cancellation) error {
	if err := hastore.ValidateCancelWrite(f, jobID, c); err != nil {
		return err
	}
	record, err := proto.Marshal(c)
	if err != nil {
		return fmt.Errorf("hastore: encode cancel request of job %s: %w", jobID, err)
	}
	resultKey, cancelKey := s.resultKey(jobID), s.cancelKey(jobID)
	resp, err := s.fenced(ctx, f, clientv3.OpTxn(
		[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(resultKey), "=", 0)},
		[]clientv3.Op{clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(s.planKey(jobID)), ">", 0)},
			[]clientv3.Op{clientv3.OpTxn(
				[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(cancelKey), "=", 0)},
				[]clientv3.Op{clientv3.OpPut(cancelKey, string(record))}, nil)}, nil)},
		[]clientv3.Op{clientv3.OpGet(resultKey)}))
	if err != nil {
		return err
	}
	outer := resp.Responses[0].GetResponseTxn()
	if outer.GetSucceeded() {
		if !outer.GetResponses()[0].GetResponseTxn().GetSucceeded() {
			return hastore.ErrPlanNotFound
		}
		return nil
	}
	return jobTerminal(jobID, outer.GetResponses()[0])
}

// jobTerminal is the refusal of a write to a job with a result entry,
// from a read of the entry in the refusing transaction.
func jobTerminal(jobID string, read *pb.ResponseOp) error {
	terminal := &hastore.JobTerminalError{JobID: jobID}
	if kvs := read.GetResponseRange().GetKvs(); len(kvs) > 0 {
		entry := new(hastorev1.JobResultEntry)
		if err := proto.Unmarshal(kvs[0].Value, entry); err != nil {
			return fmt.Errorf("hastore: decode result of job %s: %w", jobID, err)
		}
		terminal.Status = entry.GetResult().GetStatus()
	}
	return terminal
}

// CancelRequested implements hastore.Store.
func (s *Store) CancelRequested(ctx context.Context, jobID string) (bool, error) {
	if err := hastore.ValidateJobID(jobID); err != nil {
		return false, err
	}
	resp, err := s.client.Get(ctx, s.cancelKey(jobID), clientv3.WithCountOnly())
	if err != nil {
		return false, unavailable(ctx, err)
	}
	return resp.Count > 0, nil
}

// Cancellation implements hastore.Store.
func (s *Store) Cancellation(ctx context.Context, jobID string) (*jobplanev1.Cancellation, error) {
	if err := hastore.ValidateJobID(jobID); err != nil {
		return nil, err
	}
	resp, err := s.client.Get(ctx, s.cancelKey(jobID))
	if err != nil {
		return nil, unavailable(ctx, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, nil
	}
	return decodeCancellation(jobID, resp.Kvs[0].Value)
}

// decodePlan decodes the stored plan of job jobID.
func decodePlan(jobID string, value []byte) (*hastorev1.ExecutionPlan, error) {
	plan := new(hastorev1.ExecutionPlan)
	if err := proto.Unmarshal(value, plan); err != nil {
		return nil, fmt.Errorf("hastore: decode plan of job %s: %w", jobID, err)
	}
	return plan, nil
}

// decodeCancellation decodes the stored cancel request of job jobID.
func decodeCancellation(jobID string, value []byte) (*jobplanev1.Cancellation, error) {
	c := new(jobplanev1.Cancellation)
	if err := proto.Unmarshal(value, c); err != nil {
		return nil, fmt.Errorf("hastore: decode cancel request of job %s: %w", jobID, err)
	}
	return c, nil
}

// CreateDirtyJobResult implements hastore.Store.
func (s *Store) CreateDirtyJobResult(ctx context.Context, f hastore.Fence, result *jobplanev1.JobResult) error {
	return s.createResult(ctx, f, result, hastorev1.JobResultState_JOB_RESULT_STATE_DIRTY)
}

// createResult puts result in state if the job has no result yet, and
// runs extra in the same fenced transaction. If the job's entry holds an
// equal result, in state or a later one (clean after dirty), the call is
// a repetition of the one that created it: it succeeds, changing nothing.
// A result that a cancel request overrides (FINISHED, FAILED) is put only
// if the job has no cancel request, checked in the same transaction.
func (s *Store) createResult(ctx context.Context, f hastore.Fence, result *jobplanev1.JobResult, state hastorev1.JobResultState, extra ...clientv3.Op) error {
	if err := hastore.ValidateResultWrite(f, result); err != nil {
		return err
	}
	data, err := hastore.Canonical(&hastorev1.JobResultEntry{Result: result, State: state})
	if err != nil {
		return fmt.Errorf("hastore: encode result: %w", err)
	}
	key := s.resultKey(result.GetJobId())
	writes := append([]clientv3.Op{clientv3.OpPut(key, string(data))}, extra...)
	guarded := hastore.CancelOverrides(result.GetStatus())
	var claims []string
	if guarded {
		writes = []clientv3.Op{clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(s.cancelKey(result.GetJobId())), "=", 0)},
			writes, nil)}
		// The result reads the cancel key, and a cancel request reads
		// the result key: in one batch both would see the state before
		// the other and both apply. Claiming the cancel key keeps them
		// apart, applied in the order they were made (committer.go).
		claims = []string{s.cancelKey(result.GetJobId())}
	}
	resp, err := s.fencedClaiming(ctx, f, claims, clientv3.OpTxn(
		[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", 0)},
		writes,
		[]clientv3.Op{clientv3.OpGet(key)}))
	if err != nil {
		return err
	}
	txn := resp.Responses[0].GetResponseTxn()
	if txn.GetSucceeded() {
		if guarded && !txn.GetResponses()[0].GetResponseTxn().GetSucceeded() {
			return hastore.ErrCancelRequested
		}
		return nil
	}
	kvs := txn.GetResponses()[0].GetResponseRange().GetKvs()
	if len(kvs) == 0 {
		return hastore.ErrResultExists
	}
	stored := new(hastorev1.JobResultEntry)
	if err := proto.Unmarshal(kvs[0].Value, stored); err != nil {
		return fmt.Errorf("hastore: decode result of job %s: %w", result.GetJobId(), err)
	}
	if !hastore.Same(stored.GetResult(), result) || stored.GetState() < state {
		return hastore.ErrResultExists
	}
	return nil
}

// getResult reads a result entry and its mod revision; entry is nil and
// modRev 0 when absent.
func (s *Store) getResult(ctx context.Context, jobID string) (entry *hastorev1.JobResultEntry, modRev int64, err error) {
	resp, err := s.client.Get(ctx, s.resultKey(jobID))
	if err != nil {
		return nil, 0, unavailable(ctx, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, 0, nil
	}
	entry = new(hastorev1.JobResultEntry)
	if err := proto.Unmarshal(resp.Kvs[0].Value, entry); err != nil {
		return nil, 0, fmt.Errorf("hastore: decode result of job %s: %w", jobID, err)
	}
	return entry, resp.Kvs[0].ModRevision, nil
}

// updateResult applies change to the job's entry in a fenced
// compare-and-swap, retrying while the entry changes underneath. change
// returns the ops to apply, or an error to return after the fence check.
// Ops are applied only while the job has no plan, checked in the same
// transaction (ErrPlanNotDeleted if it has one): a result is marked clean
// or deleted only once its plan is gone. The write claims the plan key,
// so that it never shares a batch with a write of the plan and the two
// apply in the order they were made.
func (s *Store) updateResult(ctx context.Context, f hastore.Fence, jobID string, change func(*hastorev1.JobResultEntry) ([]clientv3.Op, error)) error {
	for {
		entry, modRev, err := s.getResult(ctx, jobID)
		if err != nil {
			return err
		}
		ops, outcome := change(entry)
		if len(ops) == 0 {
			conflict, err := s.fencedCAS(ctx, f, s.resultKey(jobID), modRev)
			if err != nil {
				return err
			}
			if !conflict {
				return outcome
			}
			continue
		}
		planKey := s.planKey(jobID)
		resp, err := s.fencedClaiming(ctx, f, []string{planKey}, clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(s.resultKey(jobID)), "=", modRev)},
			[]clientv3.Op{clientv3.OpTxn(
				[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(planKey), "=", 0)},
				ops, nil)},
			nil))
		if err != nil {
			return err
		}
		cas := resp.Responses[0].GetResponseTxn()
		if !cas.GetSucceeded() {
			continue
		}
		if !cas.GetResponses()[0].GetResponseTxn().GetSucceeded() {
			return hastore.ErrPlanNotDeleted
		}
		return outcome
	}
}

// MarkJobResultClean implements hastore.Store: the entry is marked clean
// only if the job has no plan, checked in the transaction that marks it.
func (s *Store) MarkJobResultClean(ctx context.Context, f hastore.Fence, jobID string) error {
	if err := hastore.ValidateJobWrite(f, jobID); err != nil {
		return err
	}
	return s.updateResult(ctx, f, jobID, func(e *hastorev1.JobResultEntry) ([]clientv3.Op, error) {
		switch {
		case e == nil:
			return nil, hastore.ErrResultNotFound
		case e.GetState() == hastorev1.JobResultState_JOB_RESULT_STATE_CLEAN:
			return nil, nil
		}
		clean := proto.CloneOf(e)
		clean.State = hastorev1.JobResultState_JOB_RESULT_STATE_CLEAN
		data, err := hastore.Canonical(clean)
		if err != nil {
			return nil, fmt.Errorf("hastore: encode result: %w", err)
		}
		return []clientv3.Op{clientv3.OpPut(s.resultKey(jobID), string(data))}, nil
	})
}

// DeleteJobResultEntry implements hastore.Store: a clean entry is deleted
// only if the job has no plan, checked in the transaction that deletes it.
func (s *Store) DeleteJobResultEntry(ctx context.Context, f hastore.Fence, jobID string) error {
	if err := hastore.ValidateJobWrite(f, jobID); err != nil {
		return err
	}
	return s.updateResult(ctx, f, jobID, func(e *hastorev1.JobResultEntry) ([]clientv3.Op, error) {
		switch {
		case e == nil:
			return nil, nil
		case e.GetState() != hastorev1.JobResultState_JOB_RESULT_STATE_CLEAN:
			return nil, hastore.ErrResultDirty
		}
		return []clientv3.Op{clientv3.OpDelete(s.resultKey(jobID))}, nil
	})
}

// GetJobResultEntry implements hastore.Store.
func (s *Store) GetJobResultEntry(ctx context.Context, jobID string) (*hastorev1.JobResultEntry, error) {
	if err := hastore.ValidateJobID(jobID); err != nil {
		return nil, err
	}
	entry, _, err := s.getResult(ctx, jobID)
	if err != nil {
		return nil, err
	}
	if entry == nil {
		return nil, hastore.ErrResultNotFound
	}
	return entry, nil
}

// ListJobResultEntries implements hastore.Store.
func (s *Store) ListJobResultEntries(ctx context.Context, state hastorev1.JobResultState, after string, limit int) ([]*hastorev1.JobResultEntry, error) {
	if err := hastore.ValidateList(after, limit); err != nil {
		return nil, err
	}
	var (
		entries []*hastorev1.JobResultEntry
		decErr  error
	)
	err := s.scan(ctx, s.resultPrefix(), after, false, func(key string, value []byte) bool {
		e := new(hastorev1.JobResultEntry)
		if err := proto.Unmarshal(value, e); err != nil {
			decErr = fmt.Errorf("hastore: decode result of job %s: %w", key, err)
			return false
		}
		if state == hastorev1.JobResultState_JOB_RESULT_STATE_UNSPECIFIED || e.GetState() == state {
			entries = append(entries, e)
		}
		return limit == 0 || len(entries) < limit
	})
	if err != nil {
		return nil, err
	}
	return entries, decErr
}

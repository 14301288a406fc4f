package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/server/hastore"
)

// store sits between the reference server and the runner's HA store. It
// publishes the proxy's address instead of the server's, remembers the
// Dispatcher's fence, and breaks the store-side promise its mode names.
type store struct {
	hastore.Store
	mode   string
	public string // the proxy's base URL
	// cluster is the base URL of the proxy's cluster listener, in the
	// shape cluster-apart; else empty.
	cluster string

	mu         sync.Mutex
	dispatcher hastore.Fence             // the latest jobmanager grant
	grants     map[string]election.Token // by job election: the first grant
	// claims are, by job election, the newest JobMaster token a
	// RegisterJobMaster carried (trust-job-master-token).
	claims map[string]election.Token
	// failedPuts are the jobs whose plan put failed (late-plan-ignored).
	failedPuts map[string]bool
}

func newStore(inner hastore.Store, mode, public string) *store {
	return &store{Store: inner, mode: mode, public: public, grants: map[string]election.Token{}, claims: map[string]election.Token{},
		failedPuts: map[string]bool{}}
}

// claim records that a RegisterJobMaster for job id carried token t.
func (s *store) claim(id string, t election.Token) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t.Epoch > s.claims[election.Job(id)].Epoch {
		s.claims[election.Job(id)] = t
	}
}

// Leader, in mode trust-job-master-token, answers for a job's election
// the newest token a RegisterJobMaster claimed, when it is newer than the
// grant: the child's ResourceManager then registers it, as one that takes
// the caller's word for its grant would. In mode stale-token-deploys it
// answers a job's first grant while any grant of the job leads, as the
// leaderships that mode hands the server say: the server's
// ResourceManager takes the JobMaster's stale token for the current one.
func (s *store) Leader(ctx context.Context, name string) (election.Leader, error) {
	info, err := s.Store.Leader(ctx, name)
	if err != nil {
		return info, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.mode {
	case "trust-job-master-token":
		if c, ok := s.claims[name]; ok && c.Epoch > info.Token.Epoch {
			info.Token = c
		}
	case "stale-token-deploys":
		if first, ok := s.grants[name]; ok && !info.Token.IsZero() {
			info.Token = first
		}
	}
	return info, nil
}

func (s *store) fence() hastore.Fence {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dispatcher
}

// published is the address the server publishes for election: the
// proxy's (and its cluster listener's, in the shape cluster-apart), or
// none for a job's election in the shape job-address-unpublished.
func (s *store) published(name string) string {
	if s.mode == "job-address-unpublished" && strings.HasPrefix(name, "job/") {
		return ""
	}
	return election.JoinAddresses(s.public, s.cluster)
}

func (s *store) ConfirmLeadership(ctx context.Context, f hastore.Fence, _ string) error {
	address := s.published(f.Election)
	if address == "" {
		// The confirmation still fails for a leadership that has ended,
		// as ConfirmLeadership would, but publishes nothing.
		info, err := s.Store.Leader(ctx, f.Election)
		if err != nil {
			return err
		}
		if info.Token != f.Token {
			return hastore.ErrStaleToken
		}
		return nil
	}
	return s.Store.ConfirmLeadership(ctx, f, address)
}

// privateDigest stands for a digest an implementation computes its own
// way (say, of its own encoding of the graph, not normalized).
func privateDigest(d []byte) []byte {
	sum := sha256.Sum256(append([]byte("private:"), d...))
	return sum[:]
}

func (s *store) PutExecutionPlan(ctx context.Context, f hastore.Fence, plan *hastorev1.ExecutionPlan) error {
	switch s.mode {
	case "private-digest":
		plan = proto.CloneOf(plan)
		plan.Digest = privateDigest(plan.GetDigest())
	case "ack-before-persist":
		go func() {
			time.Sleep(time.Second)
			_ = s.Store.PutExecutionPlan(context.Background(), f, plan)
		}()
		return nil
	case "retry-stale-write":
		err := s.Store.PutExecutionPlan(ctx, f, plan)
		if errors.Is(err, hastore.ErrStaleToken) {
			err = s.Store.PutExecutionPlan(ctx, f, plan)
		}
		return err
	}
	err := s.Store.PutExecutionPlan(ctx, f, plan)
	if err != nil && s.mode == "late-plan-ignored" {
		s.mu.Lock()
		s.failedPuts[plan.GetJobId()] = true
		s.mu.Unlock()
	}
	return err
}

// GetExecutionPlan, in late-plan-ignored, shows no plan of a job whose
// plan put failed: the server reads back what it was told, and looks no
// further for a plan the store applied later.
func (s *store) GetExecutionPlan(ctx context.Context, jobID string) (*hastorev1.ExecutionPlan, error) {
	s.mu.Lock()
	failed := s.failedPuts[jobID]
	s.mu.Unlock()
	if failed {
		return nil, hastore.ErrPlanNotFound
	}
	return s.Store.GetExecutionPlan(ctx, jobID)
}

// PutExecutionPlanCreated is PutExecutionPlan, broken as its mode says:
// the proxy's HAStoreService handler, which the child reaches, puts every
// plan with it. It reports created=false, which the child (the reference
// server) does not read.
func (s *store) PutExecutionPlanCreated(ctx context.Context, f hastore.Fence, plan *hastorev1.ExecutionPlan) (bool, error) {
	return false, s.PutExecutionPlan(ctx, f, plan)
}

func (s *store) RequestCancel(ctx context.Context, f hastore.Fence, jobID string, c *jobplanev1.Cancellation) error {
	switch s.mode {
	case "cancel-not-durable":
		return nil // acknowledged, never recorded
	case "cancel-recorded-late":
		// Acknowledged first, recorded a moment after the answer left.
		go func() {
			time.Sleep(200 * time.Millisecond)
			_ = s.Store.RequestCancel(context.WithoutCancel(ctx), f, jobID, c)
		}()
		return nil
	}
	if s.mode == "cancel-record-not-durable" {
		c = nil // the request is recorded, its id and reason are not
	}
	return s.Store.RequestCancel(ctx, f, jobID, c)
}

func (s *store) CreateDirtyJobResult(ctx context.Context, f hastore.Fence, res *jobplanev1.JobResult) error {
	switch s.mode {
	case "private-digest":
		res = proto.CloneOf(res)
		res.PlanDigest = privateDigest(res.GetPlanDigest())
	case "delete-plan-first":
		if err := s.Store.DeleteExecutionPlan(ctx, f, res.GetJobId()); err != nil {
			return err
		}
	case "clean-early":
		if err := s.Store.CreateDirtyJobResult(ctx, f, res); err != nil {
			return err
		}
		return s.Store.MarkJobResultClean(ctx, f, res.GetJobId())
	}
	return s.Store.CreateDirtyJobResult(ctx, f, res)
}

// FinishJob takes the contract's three steps through this store, so that
// its modes break the result's write (CreateDirtyJobResult) whatever the
// inner store would do in one write.
func (s *store) FinishJob(ctx context.Context, f hastore.Fence, res *jobplanev1.JobResult) error {
	return hastore.FinishJobInSteps(ctx, s, f, res)
}

func (s *store) ListExecutionPlans(ctx context.Context, after string, limit int) ([]string, error) {
	if s.mode == "no-recovery" {
		return nil, nil
	}
	return s.Store.ListExecutionPlans(ctx, after, limit)
}

func (s *store) GetJobResultEntry(ctx context.Context, jobID string) (*hastorev1.JobResultEntry, error) {
	if s.mode == "rerun-dirty" {
		return nil, hastore.ErrResultNotFound
	}
	return s.Store.GetJobResultEntry(ctx, jobID)
}

func (s *store) ListJobResultEntries(ctx context.Context, state hastorev1.JobResultState, after string, limit int) ([]*hastorev1.JobResultEntry, error) {
	if s.mode == "rerun-dirty" {
		return nil, nil
	}
	entries, err := s.Store.ListJobResultEntries(ctx, state, after, limit)
	if s.mode == "dirty-taken-as-clean" {
		// The server takes every result it lists as cleaned up: a
		// cleanup that a crash cut short is never finished.
		for i, e := range entries {
			e = proto.CloneOf(e)
			e.State = hastorev1.JobResultState_JOB_RESULT_STATE_CLEAN
			entries[i] = e
		}
	}
	return entries, err
}

func (s *store) OpenSession(ctx context.Context, cfg hastore.SessionConfig) (hastore.Session, error) {
	sess, err := s.Store.OpenSession(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &session{Session: sess, s: s}, nil
}

type session struct {
	hastore.Session
	s *store

	mu          sync.Mutex
	failedUntil time.Time // renew-late: renewals fail until then
}

// KeepAlive, in mode renew-late, renews no sooner than 4s after a renewal
// failed, as a server that waits a whole interval more after a failure
// would: a renewal that timed out and the wait then outlast the lease.
func (ss *session) KeepAlive(ctx context.Context) (time.Duration, error) {
	if ss.s.mode != "renew-late" {
		return ss.Session.KeepAlive(ctx)
	}
	ss.mu.Lock()
	late := time.Now().Before(ss.failedUntil)
	ss.mu.Unlock()
	if late {
		return 0, hastore.ErrUnavailable
	}
	ttl, err := ss.Session.KeepAlive(ctx)
	if err != nil {
		ss.mu.Lock()
		ss.failedUntil = time.Now().Add(4 * time.Second)
		ss.mu.Unlock()
	}
	return ttl, err
}

// PutExecutionPlanAndLead puts the plan through this store (its modes
// apply) and enters no candidacy, so that the job's leadership comes from
// Campaign, which publishes the proxy's address and breaks it as the mode
// says.
func (ss *session) PutExecutionPlanAndLead(ctx context.Context, f hastore.Fence, plan *hastorev1.ExecutionPlan, _ string) (*hastore.Leadership, error) {
	return hastore.PutExecutionPlanNoLead(ctx, ss.s, f, plan)
}

// Campaign publishes the proxy's address, and breaks the leadership the
// server gets where the mode says so.
func (ss *session) Campaign(ctx context.Context, name, _ string) (*hastore.Leadership, error) {
	s := ss.s
	l, err := ss.Session.Campaign(ctx, name, s.published(name))
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if name == election.JobManager {
		s.dispatcher = l.Fence()
		return l, nil
	}
	first, seen := s.grants[name]
	if !seen {
		s.grants[name] = l.Token()
	}
	switch {
	case s.mode == "runs-twice" && strings.HasPrefix(name, "job/") && !seen:
		// Give the job's first leadership up: the server runs the job
		// under a second JobMaster.
		_ = s.Store.Resign(ctx, l.Fence())
		return l, nil
	case s.mode == "stale-token-deploys" && seen:
		// The server keeps deploying under its first token.
		stale, _ := hastore.NewLeadership(l.Context(), hastore.Fence{Election: name, Token: first}, s, ss.Session.ValidUntil)
		return stale, nil
	case s.mode == "ignore-revoke":
		// The server never learns that the leadership ended.
		deaf, _ := hastore.NewLeadership(context.WithoutCancel(ctx), l.Fence(), s, ss.Session.ValidUntil)
		return deaf, nil
	case s.mode == "keep-job-leaderships":
		// Resigned through this store (see Resign), also when a server
		// ends the grant by withdrawing its candidacy (HAStoreService
		// .Withdraw), as the TypeScript JobManager does.
		kept, _ := hastore.NewLeadership(l.Context(), l.Fence(), s, ss.Session.ValidUntil)
		return kept, nil
	}
	return l, nil
}

// The checkpoint calls pass through to the runner's store, but for the
// checkpoint breaks.
var _ hastore.Checkpoints = (*store)(nil)

func (s *store) checkpoints() hastore.Checkpoints {
	c, _ := s.Store.(hastore.Checkpoints)
	return c
}

func (s *store) AddCheckpoint(ctx context.Context, f hastore.Fence, cp *hastorev1.CompletedCheckpoint, retain int) ([]uint64, error) {
	switch s.mode {
	case "ack-checkpoint-early":
		// Answers at once; the write lands a second later.
		go func() {
			time.Sleep(time.Second)
			_, _ = s.checkpoints().AddCheckpoint(context.Background(), f, cp, retain)
		}()
		return nil, nil
	case "checkpoint-errors-ignored":
		subsumed, _ := s.checkpoints().AddCheckpoint(ctx, f, cp, retain)
		return subsumed, nil
	}
	return s.checkpoints().AddCheckpoint(ctx, f, cp, retain)
}

func (s *store) LatestCheckpoint(ctx context.Context, jobID string) (*hastorev1.CompletedCheckpoint, uint64, error) {
	if s.mode == "forget-checkpoints" {
		return nil, 0, nil // as if the job had never checkpointed
	}
	return s.checkpoints().LatestCheckpoint(ctx, jobID)
}

func (s *store) ListCheckpoints(ctx context.Context, jobID string, after uint64, limit int) ([]*hastorev1.CompletedCheckpoint, error) {
	return s.checkpoints().ListCheckpoints(ctx, jobID, after, limit)
}

func (s *store) AddSavepoint(ctx context.Context, f hastore.Fence, sp *hastorev1.Savepoint) error {
	switch s.mode {
	case "savepoint-not-durable":
		return nil // acknowledged, never stored
	case "savepoint-id-per-job":
		// Names the savepoint by its job and checkpoint ids alone, the
		// same for a later run of the job id.
		sp = proto.CloneOf(sp)
		sp.SavepointId = fmt.Sprintf("sp-%s-%d", sp.GetJobId(), sp.GetCheckpointId())
	}
	return s.checkpoints().AddSavepoint(ctx, f, sp)
}

func (s *store) GetSavepoint(ctx context.Context, id string) (*hastorev1.Savepoint, error) {
	return s.checkpoints().GetSavepoint(ctx, id)
}

func (s *store) ListSavepoints(ctx context.Context, jobID, after string, limit int) ([]*hastorev1.Savepoint, error) {
	return s.checkpoints().ListSavepoints(ctx, jobID, after, limit)
}

func (s *store) DeleteSavepoint(ctx context.Context, f hastore.Fence, id string) error {
	return s.checkpoints().DeleteSavepoint(ctx, f, id)
}

// Resign, in mode keep-job-leaderships, does nothing for a job's
// election: the server's grants of its jobs stay with its session, as
// with a server that keeps them when it loses `jobmanager`.
func (s *store) Resign(ctx context.Context, f hastore.Fence) error {
	if s.mode == "keep-job-leaderships" && strings.HasPrefix(f.Election, election.JobPrefix) {
		return nil
	}
	return s.Store.Resign(ctx, f)
}

package localcluster

import (
	"context"
	"sync"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/server/hastore"
)

// StoreCall is one recorded HA-store call.
type StoreCall struct {
	// Op is the call: "put-plan", "delete-plan", "request-cancel",
	// "create-dirty", "mark-clean", "campaign" or "granted".
	Op string
	// Key is the job id, or the election for campaigns.
	Key string
	// Err is the call's error.
	Err error
}

// StoreRecorder is a hastore.Store that records the calls that matter for the
// contract's ordering promises, in order, and can fail the next call of an
// operation.
type StoreRecorder struct {
	hastore.Store

	mu        sync.Mutex
	events    []StoreCall
	fail      map[string]int // op -> calls still to fail
	failAfter map[string]int // op -> calls still to apply, then fail
}

// NewStoreRecorder wraps s.
func NewStoreRecorder(s hastore.Store) *StoreRecorder {
	return &StoreRecorder{Store: s, fail: map[string]int{}, failAfter: map[string]int{}}
}

// FailAfterNext makes the next n calls of op take effect in the store and
// then fail with ErrUnavailable, as a call whose answer was lost.
func (r *StoreRecorder) FailAfterNext(op string, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failAfter[op] = n
}

// FailNext makes the next n calls of op fail with ErrUnavailable.
func (r *StoreRecorder) FailNext(op string, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fail[op] = n
}

// Events returns the events so far.
func (r *StoreRecorder) Events() []StoreCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]StoreCall(nil), r.events...)
}

// Count returns how many successful events of op with key were recorded.
func (r *StoreRecorder) Count(op, key string) int {
	n := 0
	for _, e := range r.Events() {
		if e.Op == op && e.Key == key && e.Err == nil {
			n++
		}
	}
	return n
}

// GetExecutionPlan reads through, unrecorded; FailNext("get-plan", n)
// fails the next n reads.
func (r *StoreRecorder) GetExecutionPlan(ctx context.Context, jobID string) (*hastorev1.ExecutionPlan, error) {
	r.mu.Lock()
	failing := r.fail["get-plan"] > 0
	if failing {
		r.fail["get-plan"]--
	}
	r.mu.Unlock()
	if failing {
		return nil, hastore.ErrUnavailable
	}
	return r.Store.GetExecutionPlan(ctx, jobID)
}

// call records op on key around f, failing it if asked to.
func (r *StoreRecorder) call(op, key string, f func() error) error {
	r.mu.Lock()
	var err error
	if r.fail[op] > 0 {
		r.fail[op]--
		err = hastore.ErrUnavailable
	}
	r.mu.Unlock()
	if err == nil {
		err = f()
	}
	r.mu.Lock()
	if err == nil && r.failAfter[op] > 0 {
		r.failAfter[op]--
		err = hastore.ErrUnavailable
	}
	r.events = append(r.events, StoreCall{Op: op, Key: key, Err: err})
	r.mu.Unlock()
	return err
}

// PutExecutionPlan is recorded as "put-plan".
func (r *StoreRecorder) PutExecutionPlan(ctx context.Context, f hastore.Fence, plan *hastorev1.ExecutionPlan) error {
	return r.call("put-plan", plan.GetJobId(), func() error { return r.Store.PutExecutionPlan(ctx, f, plan) })
}

// PutExecutionPlanCreated is recorded as "put-plan" too.
func (r *StoreRecorder) PutExecutionPlanCreated(ctx context.Context, f hastore.Fence, plan *hastorev1.ExecutionPlan) (created bool, err error) {
	err = r.call("put-plan", plan.GetJobId(), func() error {
		var err error
		created, err = r.Store.PutExecutionPlanCreated(ctx, f, plan)
		return err
	})
	return created, err
}

// DeleteExecutionPlan is recorded as "delete-plan".
func (r *StoreRecorder) DeleteExecutionPlan(ctx context.Context, f hastore.Fence, jobID string) error {
	return r.call("delete-plan", jobID, func() error { return r.Store.DeleteExecutionPlan(ctx, f, jobID) })
}

// RequestCancel is recorded as "request-cancel".
func (r *StoreRecorder) RequestCancel(ctx context.Context, f hastore.Fence, jobID string, c *jobplanev1.Cancellation) error {
	return r.call("request-cancel", jobID, func() error { return r.Store.RequestCancel(ctx, f, jobID, c) })
}

// CreateDirtyJobResult is recorded as "create-dirty".
func (r *StoreRecorder) CreateDirtyJobResult(ctx context.Context, f hastore.Fence, res *jobplanev1.JobResult) error {
	return r.call("create-dirty", res.GetJobId(), func() error { return r.Store.CreateDirtyJobResult(ctx, f, res) })
}

// MarkJobResultClean is recorded as "mark-clean".
func (r *StoreRecorder) MarkJobResultClean(ctx context.Context, f hastore.Fence, jobID string) error {
	return r.call("mark-clean", jobID, func() error { return r.Store.MarkJobResultClean(ctx, f, jobID) })
}

// FinishJob takes the contract's three steps through the StoreRecorder's own
// CreateDirtyJobResult, DeleteExecutionPlan and MarkJobResultClean, so
// that each is recorded, and can be failed, as its own call, whatever
// the wrapped store would do in one write.
func (r *StoreRecorder) FinishJob(ctx context.Context, f hastore.Fence, res *jobplanev1.JobResult) error {
	return hastore.FinishJobInSteps(ctx, r, f, res)
}

// OpenSession opens a session whose campaigns are recorded as
// "campaign" when they start and "granted" when they end.
func (r *StoreRecorder) OpenSession(ctx context.Context, cfg hastore.SessionConfig) (hastore.Session, error) {
	s, err := r.Store.OpenSession(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &recordedSession{Session: s, r: r}, nil
}

type recordedSession struct {
	hastore.Session
	r *StoreRecorder
}

func (s *recordedSession) Campaign(ctx context.Context, election, address string) (*hastore.Leadership, error) {
	var l *hastore.Leadership
	_ = s.r.call("campaign", election, func() error { return nil })
	err := s.r.call("granted", election, func() error {
		var err error
		l, err = s.Session.Campaign(ctx, election, address)
		return err
	})
	return l, err
}

// PutExecutionPlanAndLead records the wrapped session's call, in one
// write or not, as a plan put, then, if it granted the job's leadership,
// that leadership's campaign and grant. A plan put failed after taking
// effect (FailAfterNext) loses the grant with its answer: the leadership
// is given up, so that the job's runner campaigns for it, as it would
// after a real lost answer. A session whose store cannot combine the two
// puts the plan alone, and grants nothing.
func (s *recordedSession) PutExecutionPlanAndLead(ctx context.Context, f hastore.Fence, plan *hastorev1.ExecutionPlan, address string) (*hastore.Leadership, error) {
	var l *hastore.Leadership
	err := s.r.call("put-plan", plan.GetJobId(), func() error {
		var err error
		l, err = s.Session.PutExecutionPlanAndLead(ctx, f, plan, address)
		return err
	})
	switch {
	case err != nil && l != nil:
		_ = l.Resign(context.WithoutCancel(ctx))
		return nil, err
	case err != nil || l == nil:
		return nil, err
	}
	election := election.Job(plan.GetJobId())
	s.r.mu.Lock()
	s.r.events = append(s.r.events, StoreCall{Op: "campaign", Key: election}, StoreCall{Op: "granted", Key: election})
	s.r.mu.Unlock()
	return l, nil
}

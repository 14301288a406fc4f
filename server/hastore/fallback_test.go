package hastore_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/server/hastore"
)

// stepStore records the writes FinishJobInSteps and PutExecutionPlanNoLead
// make, and fails the one named in fail. Its other methods are not
// called (the embedded nil Store would panic).
type stepStore struct {
	hastore.Store
	calls []string
	fail  string
	err   error
}

func (s *stepStore) step(name string) error {
	s.calls = append(s.calls, name)
	if name == s.fail {
		return s.err
	}
	return nil
}

func (s *stepStore) CreateDirtyJobResult(context.Context, hastore.Fence, *jobplanev1.JobResult) error {
	return s.step("create-dirty")
}

func (s *stepStore) DeleteExecutionPlan(context.Context, hastore.Fence, string) error {
	return s.step("delete-plan")
}

func (s *stepStore) MarkJobResultClean(context.Context, hastore.Fence, string) error {
	return s.step("mark-clean")
}

func (s *stepStore) PutExecutionPlan(context.Context, hastore.Fence, *hastorev1.ExecutionPlan) error {
	return s.step("put-plan")
}

// FinishJobInSteps makes the contract's three calls in order and stops at
// the first error: returned as it is before the result is recorded, and
// as a *CleanupPendingError naming what is left after.
func TestFinishJobInSteps(t *testing.T) {
	t.Parallel()
	f := hastore.Fence{Election: election.JobManager, Token: election.Token{SessionID: "s", Epoch: 1}}
	result := &jobplanev1.JobResult{JobId: "j", Status: jobplanev1.JobStatus_JOB_STATUS_FINISHED}
	for _, tc := range []struct {
		fail        string
		err         error
		wantCalls   []string
		pending     bool
		planDeleted bool
	}{
		{"", nil, []string{"create-dirty", "delete-plan", "mark-clean"}, false, false},
		{"create-dirty", hastore.ErrCancelRequested, []string{"create-dirty"}, false, false},
		{"create-dirty", hastore.ErrResultExists, []string{"create-dirty"}, false, false},
		{"delete-plan", hastore.ErrUnavailable, []string{"create-dirty", "delete-plan"}, true, false},
		{"mark-clean", hastore.ErrStaleToken, []string{"create-dirty", "delete-plan", "mark-clean"}, true, true},
	} {
		s := &stepStore{fail: tc.fail, err: tc.err}
		err := hastore.FinishJobInSteps(context.Background(), s, f, result)
		if !slices.Equal(s.calls, tc.wantCalls) {
			t.Errorf("failing %q: calls %v, want %v", tc.fail, s.calls, tc.wantCalls)
		}
		if !errors.Is(err, tc.err) {
			t.Errorf("failing %q: err = %v, want %v", tc.fail, err, tc.err)
		}
		var pending *hastore.CleanupPendingError
		if got := errors.As(err, &pending); got != tc.pending {
			t.Errorf("failing %q: err = %v, a *CleanupPendingError: %v, want %v", tc.fail, err, got, tc.pending)
		} else if got && (pending.PlanDeleted != tc.planDeleted || pending.JobID != "j") {
			t.Errorf("failing %q: %+v, want job j and PlanDeleted %v", tc.fail, pending, tc.planDeleted)
		}
	}
}

// PutExecutionPlanNoLead puts the plan and grants nothing.
func TestPutExecutionPlanNoLead(t *testing.T) {
	t.Parallel()
	plan := &hastorev1.ExecutionPlan{JobId: "j"}
	for _, fail := range []error{nil, hastore.ErrPlanExists} {
		s := &stepStore{fail: "put-plan", err: fail}
		l, err := hastore.PutExecutionPlanNoLead(context.Background(), s, hastore.Fence{}, plan)
		if l != nil || !errors.Is(err, fail) || !slices.Equal(s.calls, []string{"put-plan"}) {
			t.Errorf("PutExecutionPlanNoLead with %v = %v, %v after %v; want no leadership, that error, one put", fail, l, err, s.calls)
		}
	}
}

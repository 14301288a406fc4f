package apierror_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
)

func TestEveryReasonHasItsCode(t *testing.T) {
	t.Parallel()
	for v, name := range jobplanev1.ErrorReason_name {
		r := jobplanev1.ErrorReason(v)
		if r == jobplanev1.ErrorReason_ERROR_REASON_UNSPECIFIED {
			continue
		}
		err := apierror.New(r, "m", map[string]string{"k": "v"})
		if err.Code() == connect.CodeInternal && r != jobplanev1.ErrorReason_ERROR_REASON_INTERNAL {
			t.Errorf("%s has no code", name)
		}
		got, md, ok := apierror.Info(err)
		if !ok || got != r || md["k"] != "v" {
			t.Errorf("Info(New(%s)) = %v, %v, %v", name, got, md, ok)
		}
	}
}

func TestNotLeaderAndStale(t *testing.T) {
	t.Parallel()
	err := apierror.NotLeader("jobmanager", "http://127.0.0.1:1")
	if err.Code() != connect.CodeUnavailable || !apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_NOT_LEADER) {
		t.Errorf("NotLeader = %v", err)
	}
	if _, md, _ := apierror.Info(err); md["leader_address"] != "http://127.0.0.1:1" {
		t.Errorf("metadata = %v", md)
	}
	stale := apierror.StaleToken("job/x", "abc", 7)
	if stale.Code() != connect.CodeAborted {
		t.Errorf("StaleToken code = %v", stale.Code())
	}
	if _, md, _ := apierror.Info(stale); md["current_epoch"] != "7" || md["current_session_id"] != "abc" {
		t.Errorf("metadata = %v", md)
	}
	br := apierror.BadRequest(apierror.Field{Path: "job_id", Description: "required"})
	if br.Code() != connect.CodeInvalidArgument || len(apierror.Violations(br)) != 1 {
		t.Errorf("BadRequest = %v", br)
	}
}

// A refusal survives the trip through an ItemError: the error rebuilt
// from it has the reason's code, the reason and the metadata, so callers
// treat a refused item of a batch call as the one-item call's error.
func TestItemErrorRoundTrip(t *testing.T) {
	t.Parallel()
	orig := apierror.New(jobplanev1.ErrorReason_ERROR_REASON_SLOT_OCCUPIED, "slot is taken", map[string]string{"slot_index": "3"})
	item := apierror.Item(7, orig)
	if item.GetIndex() != 7 || item.GetMessage() != "slot is taken" {
		t.Errorf("Item = %v, want index 7 and the message without its code", item)
	}
	back := apierror.FromItem(item)
	if back.Code() != connect.CodeFailedPrecondition || !apierror.Is(back, jobplanev1.ErrorReason_ERROR_REASON_SLOT_OCCUPIED) {
		t.Errorf("FromItem = %v, want FAILED_PRECONDITION with SLOT_OCCUPIED", back)
	}
	if _, md, _ := apierror.Info(back); md["slot_index"] != "3" {
		t.Errorf("metadata = %v, want slot_index 3", md)
	}
}

func TestItemErrors(t *testing.T) {
	t.Parallel()
	failed := connect.NewError(connect.CodeUnavailable, nil)
	for _, tc := range []struct {
		name    string
		callErr error
		refused []*jobplanev1.ItemError
		want    []connect.Code // 0: nil
	}{
		{"all taken", nil, nil, []connect.Code{0, 0, 0}},
		{"call failed", failed, nil, []connect.Code{connect.CodeUnavailable, connect.CodeUnavailable, connect.CodeUnavailable}},
		{"one refused", nil, []*jobplanev1.ItemError{{Index: 1, Reason: jobplanev1.ErrorReason_ERROR_REASON_EXECUTION_NOT_FOUND}}, []connect.Code{0, connect.CodeNotFound, 0}},
		{"index out of range ignored", nil, []*jobplanev1.ItemError{{Index: 3}, {Index: -1}}, []connect.Code{0, 0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			errs := apierror.ItemErrors(len(tc.want), tc.callErr, tc.refused)
			for i, err := range errs {
				if got := connect.CodeOf(err); err == nil && tc.want[i] != 0 || err != nil && got != tc.want[i] {
					t.Errorf("item %d: got %v, want code %v", i, err, tc.want[i])
				}
			}
		})
	}
}

// The typed details error.proto promises come beside the ErrorInfo.
func TestTypedDetails(t *testing.T) {
	t.Parallel()
	detail := func(err *connect.Error, into proto.Message) bool {
		for _, d := range err.Details() {
			if v, derr := d.Value(); derr == nil && proto.MessageName(v) == proto.MessageName(into) {
				proto.Merge(into, v)
				return true
			}
		}
		return false
	}
	var nl jobplanev1.NotLeaderDetails
	if !detail(apierror.NotLeader("jobmanager", "http://127.0.0.1:1"), &nl) || nl.GetLeader().GetAddress() != "http://127.0.0.1:1" || nl.GetLeader().GetElection() != "jobmanager" {
		t.Errorf("NotLeaderDetails = %v", &nl)
	}
	var st jobplanev1.StaleTokenDetails
	if !detail(apierror.StaleToken("job/x", "abc", 7), &st) || st.GetCurrent().GetEpoch() != 7 || st.GetCurrent().GetSessionId() != "abc" || st.GetElection() != "job/x" {
		t.Errorf("StaleTokenDetails = %v", &st)
	}
	bad := apierror.BadRequest(apierror.Field{Path: "job_id", Description: "required"})
	if !apierror.Is(bad, jobplanev1.ErrorReason_ERROR_REASON_INVALID_ARGUMENT) || len(apierror.Violations(bad)) != 1 {
		t.Errorf("BadRequest = %v: want reason INVALID_ARGUMENT and one violation", bad)
	}
}

// Every error a handler answers carries an ErrorInfo.
func TestComplete(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err    error
		code   connect.Code
		reason jobplanev1.ErrorReason
	}{
		{context.Canceled, connect.CodeCanceled, jobplanev1.ErrorReason_ERROR_REASON_CALL_CANCELED},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), connect.CodeDeadlineExceeded, jobplanev1.ErrorReason_ERROR_REASON_CALL_DEADLINE_EXCEEDED},
		{errors.New("boom"), connect.CodeInternal, jobplanev1.ErrorReason_ERROR_REASON_INTERNAL},
		{connect.NewError(connect.CodeUnimplemented, errors.New("no")), connect.CodeUnimplemented, jobplanev1.ErrorReason_ERROR_REASON_UNIMPLEMENTED},
		{apierror.NotLeader("jobmanager", ""), connect.CodeUnavailable, jobplanev1.ErrorReason_ERROR_REASON_NOT_LEADER},
	} {
		got := apierror.Complete(tc.err)
		if connect.CodeOf(got) != tc.code || !apierror.Is(got, tc.reason) {
			t.Errorf("Complete(%v) = %v; want %v with %v", tc.err, got, tc.code, tc.reason)
		}
	}
	if got := apierror.Complete(errors.New("secret detail")); strings.Contains(got.Error(), "secret") {
		t.Errorf("Complete sent an internal error's detail: %v", got)
	}
	if apierror.Complete(nil) != nil {
		t.Error("Complete(nil) != nil")
	}
}

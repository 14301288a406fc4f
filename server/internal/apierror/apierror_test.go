package apierror_test

import (
	"testing"

	"connectrpc.com/connect"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/server/internal/apierror"
)

func TestEveryReasonHasItsCode(t *testing.T) {
	t.Parallel()
	for v, name := range jobplanev1.ErrorReason_name {
		r := jobplanev1.ErrorReason(v)
		if r == jobplanev1.ErrorReason_ERROR_REASON_UNSPECIFIED {
			continue
		}
		err := apierror.New(r, "m", map[string]string{"k": "v"})
		if err.Code() == connect.CodeInternal {
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

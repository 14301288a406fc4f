package hastorerpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strconv"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/proto"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/server/hastore"
)

// ErrorDomain is the ErrorInfo domain of every jobplane error.
const ErrorDomain = "jobplane"

// reasonString is the ErrorInfo reason for r: its name without the
// ERROR_REASON_ prefix.
func reasonString(r jobplanev1.ErrorReason) string {
	return strings.TrimPrefix(r.String(), "ERROR_REASON_")
}

// errStreamBehind: a WatchSession stream fell too far behind and was cut.
var errStreamBehind = errors.New("hastorerpc: the stream fell behind; reconnect")

// domainErrors maps each hastore sentinel to its wire code and reason.
var domainErrors = []struct {
	err    error
	code   connect.Code
	reason jobplanev1.ErrorReason
}{
	{hastore.ErrStaleToken, connect.CodeAborted, jobplanev1.ErrorReason_ERROR_REASON_STALE_FENCING_TOKEN},
	{hastore.ErrSessionNotFound, connect.CodeNotFound, jobplanev1.ErrorReason_ERROR_REASON_SESSION_NOT_FOUND},
	{hastore.ErrCandidacyExists, connect.CodeAlreadyExists, jobplanev1.ErrorReason_ERROR_REASON_CANDIDACY_EXISTS},
	{hastore.ErrPlanNotFound, connect.CodeNotFound, jobplanev1.ErrorReason_ERROR_REASON_EXECUTION_PLAN_NOT_FOUND},
	{hastore.ErrPlanExists, connect.CodeAlreadyExists, jobplanev1.ErrorReason_ERROR_REASON_EXECUTION_PLAN_EXISTS},
	{hastore.ErrResultExists, connect.CodeAlreadyExists, jobplanev1.ErrorReason_ERROR_REASON_JOB_RESULT_EXISTS},
	{hastore.ErrResultNotFound, connect.CodeNotFound, jobplanev1.ErrorReason_ERROR_REASON_JOB_RESULT_NOT_FOUND},
	{hastore.ErrResultDirty, connect.CodeFailedPrecondition, jobplanev1.ErrorReason_ERROR_REASON_JOB_RESULT_DIRTY},
	{hastore.ErrPlanNotDeleted, connect.CodeFailedPrecondition, jobplanev1.ErrorReason_ERROR_REASON_EXECUTION_PLAN_NOT_DELETED},
	{hastore.ErrJobTerminal, connect.CodeFailedPrecondition, jobplanev1.ErrorReason_ERROR_REASON_JOB_TERMINAL},
	{hastore.ErrCancelRequested, connect.CodeFailedPrecondition, jobplanev1.ErrorReason_ERROR_REASON_JOB_CANCEL_REQUESTED},
	{hastore.ErrCheckpointIDNotIncreasing, connect.CodeFailedPrecondition, jobplanev1.ErrorReason_ERROR_REASON_CHECKPOINT_ID_NOT_INCREASING},
	{hastore.ErrSavepointNotFound, connect.CodeNotFound, jobplanev1.ErrorReason_ERROR_REASON_SAVEPOINT_NOT_FOUND},
	{hastore.ErrSavepointExists, connect.CodeAlreadyExists, jobplanev1.ErrorReason_ERROR_REASON_SAVEPOINT_EXISTS},
	{errStreamBehind, connect.CodeUnavailable, jobplanev1.ErrorReason_ERROR_REASON_STREAM_BEHIND},
}

// toConnect maps a Store error to the wire. metadata goes into the
// ErrorInfo. Errors the contract does not name become INTERNAL with a
// generic message; their detail is logged, never sent.
func toConnect(log *slog.Logger, err error, metadata map[string]string) error {
	if err == nil {
		return nil
	}
	var verr *hastore.ValidationError
	if errors.As(err, &verr) {
		br := &errdetails.BadRequest{}
		for _, v := range verr.Violations {
			br.FieldViolations = append(br.FieldViolations, &errdetails.BadRequest_FieldViolation{Field: v.Field, Description: v.Description})
		}
		cerr := connect.NewError(connect.CodeInvalidArgument, err)
		_ = withDetail(cerr, &errdetails.ErrorInfo{Reason: reasonString(jobplanev1.ErrorReason_ERROR_REASON_INVALID_ARGUMENT), Domain: ErrorDomain, Metadata: metadata})
		return withDetail(cerr, br)
	}
	var terminal *hastore.JobTerminalError
	if errors.As(err, &terminal) {
		// The result's status goes with the refusal, so that a remote
		// store's caller tells an idempotent cancel (CANCELED) apart.
		metadata = maps.Clone(metadata)
		if metadata == nil {
			metadata = map[string]string{}
		}
		metadata["status"] = terminal.Status.String()
	}
	var idErr *hastore.CheckpointIDError
	if errors.As(err, &idErr) {
		// The job's last id goes with the refusal, so that the caller
		// goes on above it.
		metadata = maps.Clone(metadata)
		if metadata == nil {
			metadata = map[string]string{}
		}
		metadata["job_id"] = idErr.JobID
		metadata["checkpoint_id"] = strconv.FormatUint(idErr.ID, 10)
		metadata["last_checkpoint_id"] = strconv.FormatUint(idErr.Last, 10)
	}
	for _, de := range domainErrors {
		if errors.Is(err, de.err) {
			info := &errdetails.ErrorInfo{Reason: reasonString(de.reason), Domain: ErrorDomain, Metadata: metadata}
			return withDetail(connect.NewError(de.code, de.err), info)
		}
	}
	info := func(code connect.Code, r jobplanev1.ErrorReason, msg error) error {
		return withDetail(connect.NewError(code, msg), &errdetails.ErrorInfo{Reason: reasonString(r), Domain: ErrorDomain})
	}
	switch {
	case errors.Is(err, hastore.ErrUnavailable):
		return info(connect.CodeUnavailable, jobplanev1.ErrorReason_ERROR_REASON_STORE_UNAVAILABLE, err)
	case errors.Is(err, context.Canceled):
		return info(connect.CodeCanceled, jobplanev1.ErrorReason_ERROR_REASON_CALL_CANCELED, err)
	case errors.Is(err, context.DeadlineExceeded):
		return info(connect.CodeDeadlineExceeded, jobplanev1.ErrorReason_ERROR_REASON_CALL_DEADLINE_EXCEEDED, err)
	}
	log.Error("ha store call failed", "err", err)
	return info(connect.CodeInternal, jobplanev1.ErrorReason_ERROR_REASON_INTERNAL, errors.New("internal error"))
}

func withDetail(cerr *connect.Error, msg proto.Message) error {
	if d, err := connect.NewErrorDetail(msg); err == nil {
		cerr.AddDetail(d)
	}
	return cerr
}

// fromConnect maps an error from the wire back to the Store's errors, so a
// remote store fails exactly as a local one.
func fromConnect(err error) error {
	if err == nil {
		return nil
	}
	var cerr *connect.Error
	if !errors.As(err, &cerr) {
		return fmt.Errorf("%w: %v", hastore.ErrUnavailable, err)
	}
	for _, d := range cerr.Details() {
		msg, derr := d.Value()
		if derr != nil {
			continue
		}
		switch m := msg.(type) {
		case *errdetails.ErrorInfo:
			if m.GetDomain() != ErrorDomain {
				continue
			}
			if m.GetReason() == reasonString(jobplanev1.ErrorReason_ERROR_REASON_JOB_TERMINAL) {
				status := jobplanev1.JobStatus(jobplanev1.JobStatus_value[m.GetMetadata()["status"]])
				return &hastore.JobTerminalError{JobID: m.GetMetadata()["job_id"], Status: status}
			}
			if m.GetReason() == reasonString(jobplanev1.ErrorReason_ERROR_REASON_CHECKPOINT_ID_NOT_INCREASING) {
				md := m.GetMetadata()
				id, _ := strconv.ParseUint(md["checkpoint_id"], 10, 64)
				last, _ := strconv.ParseUint(md["last_checkpoint_id"], 10, 64)
				return &hastore.CheckpointIDError{JobID: md["job_id"], ID: id, Last: last}
			}
			for _, de := range domainErrors {
				if m.GetReason() == reasonString(de.reason) {
					return de.err
				}
			}
		case *errdetails.BadRequest:
			verr := &hastore.ValidationError{}
			for _, v := range m.GetFieldViolations() {
				verr.Violations = append(verr.Violations, hastore.FieldViolation{Field: v.GetField(), Description: v.GetDescription()})
			}
			return verr
		}
	}
	switch cerr.Code() {
	case connect.CodeCanceled:
		return context.Canceled
	case connect.CodeDeadlineExceeded:
		return context.DeadlineExceeded
	case connect.CodeInvalidArgument:
		return &hastore.ValidationError{Violations: []hastore.FieldViolation{{Field: "", Description: cerr.Message()}}}
	}
	return fmt.Errorf("%w: %v", hastore.ErrUnavailable, err)
}

// Package apierror builds the errors jobplane services send, and reads
// them back: Connect codes with a google.rpc.ErrorInfo (domain
// "jobplane", a reason from jobplane.v1.ErrorReason) and the typed
// details error.proto names (BadRequest, NotLeaderDetails,
// StaleTokenDetails), exactly as error.proto specifies. It is the one
// place where domain failures meet wire codes for the server's services.
package apierror

import (
	"errors"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
)

// Domain is the ErrorInfo domain of every jobplane error.
const Domain = "jobplane"

// Reason returns the ErrorInfo reason string of r: its name without the
// ERROR_REASON_ prefix.
func Reason(r jobplanev1.ErrorReason) string {
	return strings.TrimPrefix(r.String(), "ERROR_REASON_")
}

// codes is the code that accompanies each reason (see error.proto).
var codes = map[jobplanev1.ErrorReason]connect.Code{
	jobplanev1.ErrorReason_ERROR_REASON_STALE_FENCING_TOKEN:      connect.CodeAborted,
	jobplanev1.ErrorReason_ERROR_REASON_NOT_LEADER:               connect.CodeUnavailable,
	jobplanev1.ErrorReason_ERROR_REASON_JOB_ALREADY_EXISTS:       connect.CodeAlreadyExists,
	jobplanev1.ErrorReason_ERROR_REASON_JOB_NOT_FOUND:            connect.CodeNotFound,
	jobplanev1.ErrorReason_ERROR_REASON_JOB_NOT_TERMINAL:         connect.CodeFailedPrecondition,
	jobplanev1.ErrorReason_ERROR_REASON_JOB_TERMINAL:             connect.CodeFailedPrecondition,
	jobplanev1.ErrorReason_ERROR_REASON_PERSIST_FAILED:           connect.CodeUnavailable,
	jobplanev1.ErrorReason_ERROR_REASON_EXECUTION_PLAN_NOT_FOUND: connect.CodeNotFound,
	jobplanev1.ErrorReason_ERROR_REASON_JOB_RESULT_EXISTS:        connect.CodeAlreadyExists,
	jobplanev1.ErrorReason_ERROR_REASON_JOB_RESULT_NOT_FOUND:     connect.CodeNotFound,
	jobplanev1.ErrorReason_ERROR_REASON_JOB_RESULT_DIRTY:         connect.CodeFailedPrecondition,
	jobplanev1.ErrorReason_ERROR_REASON_SESSION_NOT_FOUND:        connect.CodeNotFound,
	jobplanev1.ErrorReason_ERROR_REASON_NOT_REGISTERED:           connect.CodeFailedPrecondition,
	jobplanev1.ErrorReason_ERROR_REASON_SLOT_OCCUPIED:            connect.CodeFailedPrecondition,
	jobplanev1.ErrorReason_ERROR_REASON_SLOT_NOT_ALLOCATED:       connect.CodeFailedPrecondition,
	jobplanev1.ErrorReason_ERROR_REASON_UNKNOWN_INVOKABLE:        connect.CodeFailedPrecondition,
	jobplanev1.ErrorReason_ERROR_REASON_EXECUTION_NOT_FOUND:      connect.CodeNotFound,
	jobplanev1.ErrorReason_ERROR_REASON_CANDIDACY_EXISTS:         connect.CodeAlreadyExists,
	jobplanev1.ErrorReason_ERROR_REASON_EXECUTION_PLAN_EXISTS:    connect.CodeAlreadyExists,
	jobplanev1.ErrorReason_ERROR_REASON_PERSIST_OUTCOME_UNKNOWN:  connect.CodeUnavailable,
	jobplanev1.ErrorReason_ERROR_REASON_CANCEL_NOT_RECORDED:      connect.CodeUnavailable,
	jobplanev1.ErrorReason_ERROR_REASON_STORE_UNAVAILABLE:        connect.CodeUnavailable,
	jobplanev1.ErrorReason_ERROR_REASON_INVALID_ARGUMENT:         connect.CodeInvalidArgument,
	jobplanev1.ErrorReason_ERROR_REASON_REQUEST_TOO_LARGE:        connect.CodeResourceExhausted,
	jobplanev1.ErrorReason_ERROR_REASON_CALL_CANCELED:            connect.CodeCanceled,
	jobplanev1.ErrorReason_ERROR_REASON_CALL_DEADLINE_EXCEEDED:   connect.CodeDeadlineExceeded,
	jobplanev1.ErrorReason_ERROR_REASON_UNIMPLEMENTED:            connect.CodeUnimplemented,
	jobplanev1.ErrorReason_ERROR_REASON_STREAM_BEHIND:            connect.CodeUnavailable,
	jobplanev1.ErrorReason_ERROR_REASON_INTERNAL:                 connect.CodeInternal,

	jobplanev1.ErrorReason_ERROR_REASON_TASK_EXECUTOR_UNREACHABLE: connect.CodeUnavailable,
	jobplanev1.ErrorReason_ERROR_REASON_JOB_CANCEL_REQUESTED:      connect.CodeFailedPrecondition,
	jobplanev1.ErrorReason_ERROR_REASON_TOO_MANY_STREAMS:          connect.CodeResourceExhausted,
	jobplanev1.ErrorReason_ERROR_REASON_SUBMIT_RATE_EXCEEDED:      connect.CodeResourceExhausted,
	jobplanev1.ErrorReason_ERROR_REASON_TOO_MANY_JOBS:             connect.CodeResourceExhausted,
	jobplanev1.ErrorReason_ERROR_REASON_TOO_MANY_SUBTASKS:         connect.CodeResourceExhausted,

	jobplanev1.ErrorReason_ERROR_REASON_CHECKPOINT_ID_NOT_INCREASING: connect.CodeFailedPrecondition,
	jobplanev1.ErrorReason_ERROR_REASON_SAVEPOINT_NOT_FOUND:          connect.CodeNotFound,
	jobplanev1.ErrorReason_ERROR_REASON_SAVEPOINT_EXISTS:             connect.CodeAlreadyExists,
	jobplanev1.ErrorReason_ERROR_REASON_SAVEPOINT_FAILED:             connect.CodeAborted,
	jobplanev1.ErrorReason_ERROR_REASON_INVOKABLE_NOT_OFFERED:        connect.CodeFailedPrecondition,
	jobplanev1.ErrorReason_ERROR_REASON_EXECUTION_PLAN_NOT_DELETED:   connect.CodeFailedPrecondition,
}

// New returns the error for reason, with its code, a message for people,
// and metadata for programs (keys as error.proto lists them).
func New(reason jobplanev1.ErrorReason, msg string, metadata map[string]string) *connect.Error {
	code, ok := codes[reason]
	if !ok {
		code = connect.CodeInternal
	}
	err := connect.NewError(code, errors.New(msg))
	attach(err, &errdetails.ErrorInfo{Reason: Reason(reason), Domain: Domain, Metadata: metadata})
	return err
}

// Field is one offending input field.
type Field struct {
	// Path is the field's path in proto names.
	Path string
	// Description says what is wrong with it.
	Description string
}

// TokenViolation returns the violation of a fencing token at path that is
// missing or malformed (FencingToken: an empty session_id or a zero
// epoch), or nil for a well-formed one.
func TokenViolation(path string, t *jobplanev1.FencingToken) *Field {
	switch {
	case t == nil:
		return &Field{Path: path, Description: "required"}
	case t.GetSessionId() == "":
		return &Field{Path: path + ".session_id", Description: "required"}
	case t.GetEpoch() == 0:
		return &Field{Path: path + ".epoch", Description: "required (zero is malformed)"}
	}
	return nil
}

// BadRequest returns INVALID_ARGUMENT with one field violation per field;
// a field with an empty path is the request as a whole.
func BadRequest(fields ...Field) *connect.Error {
	br := &errdetails.BadRequest{}
	msgs := make([]string, 0, len(fields))
	for _, f := range fields {
		br.FieldViolations = append(br.FieldViolations, &errdetails.BadRequest_FieldViolation{Field: f.Path, Description: f.Description})
		if f.Path == "" { // the request as a whole
			msgs = append(msgs, f.Description)
			continue
		}
		msgs = append(msgs, f.Path+": "+f.Description)
	}
	err := New(jobplanev1.ErrorReason_ERROR_REASON_INVALID_ARGUMENT, "invalid argument: "+strings.Join(msgs, "; "), nil)
	attach(err, br)
	return err
}

func attach(err *connect.Error, msg proto.Message) {
	if d, derr := connect.NewErrorDetail(msg); derr == nil {
		err.AddDetail(d)
	}
}

// NotLeader is UNAVAILABLE with reason NOT_LEADER for election, giving the
// leader's address when known.
func NotLeader(election, leaderAddress string) *connect.Error {
	md := map[string]string{"election": election}
	if leaderAddress != "" {
		md["leader_address"] = leaderAddress
	}
	err := New(jobplanev1.ErrorReason_ERROR_REASON_NOT_LEADER, "not the leader of "+election, md)
	attach(err, &jobplanev1.NotLeaderDetails{Leader: &jobplanev1.LeaderInfo{Election: election, Address: leaderAddress}})
	return err
}

// StaleToken is ABORTED with reason STALE_FENCING_TOKEN for election,
// naming the current grant's epoch when known (non-zero).
func StaleToken(election, currentSessionID string, currentEpoch uint64) *connect.Error {
	md := map[string]string{"election": election}
	if currentEpoch != 0 {
		md["current_epoch"] = strconv.FormatUint(currentEpoch, 10)
		md["current_session_id"] = currentSessionID
	}
	err := New(jobplanev1.ErrorReason_ERROR_REASON_STALE_FENCING_TOKEN, "stale fencing token for "+election, md)
	details := &jobplanev1.StaleTokenDetails{Election: election}
	if currentEpoch != 0 {
		details.Current = &jobplanev1.FencingToken{SessionId: currentSessionID, Epoch: currentEpoch}
	}
	attach(err, details)
	return err
}

// RetryAfter returns err with a google.rpc.RetryInfo detail saying to
// retry after delay (rounded up to the millisecond).
func RetryAfter(err *connect.Error, delay time.Duration) *connect.Error {
	attach(err, &errdetails.RetryInfo{RetryDelay: durationpb.New(delay.Round(time.Millisecond) + roundUp(delay))})
	return err
}

// roundUp is what rounding delay to the millisecond took off, so that a
// client that waits the rounded delay does not come back early.
func roundUp(delay time.Duration) time.Duration {
	if delay.Round(time.Millisecond) < delay {
		return time.Millisecond
	}
	return 0
}

// RetryDelay returns the delay of err's google.rpc.RetryInfo detail, if
// it carries one; a negative delay reads as zero.
func RetryDelay(err error) (time.Duration, bool) {
	ri, ok := Detail[*errdetails.RetryInfo](err)
	if !ok {
		return 0, false
	}
	return max(ri.GetRetryDelay().AsDuration(), 0), true
}

// Detail returns the first detail of type M that err (a *connect.Error,
// or an error wrapping one) carries.
func Detail[M proto.Message](err error) (M, bool) {
	var zero M
	var cerr *connect.Error
	if !errors.As(err, &cerr) {
		return zero, false
	}
	for _, d := range cerr.Details() {
		if v, derr := d.Value(); derr == nil {
			if typed, ok := v.(M); ok {
				return typed, true
			}
		}
	}
	return zero, false
}

// Info returns the jobplane ErrorInfo of err, if it carries one.
func Info(err error) (reason jobplanev1.ErrorReason, metadata map[string]string, ok bool) {
	var cerr *connect.Error
	if !errors.As(err, &cerr) {
		return 0, nil, false
	}
	for _, d := range cerr.Details() {
		msg, derr := d.Value()
		if derr != nil {
			continue
		}
		info, isInfo := msg.(*errdetails.ErrorInfo)
		if !isInfo || info.GetDomain() != Domain {
			continue
		}
		v, known := jobplanev1.ErrorReason_value["ERROR_REASON_"+info.GetReason()]
		if !known {
			continue
		}
		return jobplanev1.ErrorReason(v), info.GetMetadata(), true
	}
	return 0, nil, false
}

// Is reports whether err carries the given reason.
func Is(err error, reason jobplanev1.ErrorReason) bool {
	r, _, ok := Info(err)
	return ok && r == reason
}

// Violations returns the BadRequest field violations of err, if any.
func Violations(err error) []Field {
	br, _ := Detail[*errdetails.BadRequest](err)
	var out []Field
	for _, v := range br.GetFieldViolations() {
		out = append(out, Field{Path: v.GetField(), Description: v.GetDescription()})
	}
	return out
}

// Item returns the ItemError that lists err, the refusal of the item at
// index of a batch call: its reason, message and metadata. An err without
// a jobplane reason is listed with ERROR_REASON_UNSPECIFIED; FromItem
// reads that back as INTERNAL.
func Item(index int, err error) *jobplanev1.ItemError {
	reason, md, _ := Info(err)
	msg := err.Error()
	var cerr *connect.Error
	if errors.As(err, &cerr) {
		msg = cerr.Message()
	}
	return &jobplanev1.ItemError{Index: int32(index), Reason: reason, Message: msg, Metadata: md}
}

// FromItem returns the error that the one-item call would have answered
// with for a refused item: the reason's code, with its ErrorInfo.
func FromItem(e *jobplanev1.ItemError) *connect.Error {
	return New(e.GetReason(), e.GetMessage(), e.GetMetadata())
}

// ItemErrors spreads the answer to a batch call of n items over its
// items: every item fails with callErr if the call failed; otherwise the
// refused items fail with their errors (see FromItem) and the others are
// nil. A refusal whose index is out of range is ignored.
func ItemErrors(n int, callErr error, refused []*jobplanev1.ItemError) []error {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = callErr
	}
	if callErr != nil {
		return errs
	}
	for _, r := range refused {
		if i := int(r.GetIndex()); i >= 0 && i < n {
			errs[i] = FromItem(r)
		}
	}
	return errs
}

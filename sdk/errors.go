package sdk

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
)

const (
	reasonNotLeader      = jobplanev1.ErrorReason_ERROR_REASON_NOT_LEADER
	reasonStaleToken     = jobplanev1.ErrorReason_ERROR_REASON_STALE_FENCING_TOKEN
	reasonAlreadyExists  = jobplanev1.ErrorReason_ERROR_REASON_JOB_ALREADY_EXISTS
	reasonJobNotFound    = jobplanev1.ErrorReason_ERROR_REASON_JOB_NOT_FOUND
	reasonJobTerminal    = jobplanev1.ErrorReason_ERROR_REASON_JOB_TERMINAL
	reasonJobNotTerminal = jobplanev1.ErrorReason_ERROR_REASON_JOB_NOT_TERMINAL
	reasonInvalid        = jobplanev1.ErrorReason_ERROR_REASON_INVALID_ARGUMENT
	reasonResultDirty    = jobplanev1.ErrorReason_ERROR_REASON_JOB_RESULT_DIRTY

	reasonSavepointNotFound = jobplanev1.ErrorReason_ERROR_REASON_SAVEPOINT_NOT_FOUND
	reasonSavepointFailed   = jobplanev1.ErrorReason_ERROR_REASON_SAVEPOINT_FAILED

	reasonInvokableNotOffered = jobplanev1.ErrorReason_ERROR_REASON_INVOKABLE_NOT_OFFERED
)

// Sentinel errors, for errors.Is on the errors a Client returns.
var (
	// ErrJobNotFound: the cluster does not know the job (JOB_NOT_FOUND).
	ErrJobNotFound = errors.New("job not found")
	// ErrJobTerminal: the job already ended FINISHED or FAILED, so it
	// cannot be canceled (JOB_TERMINAL).
	ErrJobTerminal = errors.New("job already ended")
	// ErrJobNotTerminal: the job has no result yet (JOB_NOT_TERMINAL).
	ErrJobNotTerminal = errors.New("job has not ended")
	// ErrCleanupPending: the job ended but its cleanup is not done yet,
	// so its result cannot be purged, nor its id reused, yet
	// (JOB_RESULT_DIRTY): nothing was done; try again shortly.
	ErrCleanupPending = errors.New("the job's cleanup is not done yet")
	// ErrSavepointNotFound: no savepoint has the id (SAVEPOINT_NOT_FOUND),
	// such as the one a submitted job's restore_from_savepoint names.
	ErrSavepointNotFound = errors.New("savepoint not found")
	// ErrSavepointFailed: the savepoint could not be taken, and nothing
	// was stored (SAVEPOINT_FAILED): the job was not running all its
	// subtasks, a subtask declined or did not answer in time, or the
	// store refused the write. The job runs on; try again once it runs.
	ErrSavepointFailed = errors.New("savepoint failed")
	// ErrCheckpointsUnsupported: the server keeps no checkpoints or
	// savepoints (UNIMPLEMENTED): its HA store does not, or it predates
	// contract 1.2.
	ErrCheckpointsUnsupported = errors.New("the server keeps no checkpoints or savepoints")
)

// Error is an error answered by a jobplane server: a Connect code with
// the contract's ErrorInfo. The typed errors of this package wrap one.
type Error struct {
	// Code is the answer's Connect (gRPC) code.
	Code connect.Code
	// Reason is the contract's reason (ErrorInfo.reason), or
	// ERROR_REASON_UNSPECIFIED when the answer carried none (an error
	// of the transport, say).
	Reason jobplanev1.ErrorReason
	// Message is the server's message, for people.
	Message string
	// Metadata is the ErrorInfo's metadata (keys as error.proto lists
	// them for the reason).
	Metadata map[string]string

	cause *connect.Error
}

// Error returns the message with the reason, such as "job "x" not found
// (JOB_NOT_FOUND)".
func (e *Error) Error() string {
	if e.Reason == jobplanev1.ErrorReason_ERROR_REASON_UNSPECIFIED {
		return fmt.Sprintf("%s (%s)", e.Message, e.Code)
	}
	return fmt.Sprintf("%s (%s)", e.Message, ReasonName(e.Reason))
}

// Unwrap returns the *connect.Error.
func (e *Error) Unwrap() error { return e.cause }

// Is matches the sentinel errors by reason.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrJobNotFound:
		return e.Reason == reasonJobNotFound
	case ErrJobTerminal:
		return e.Reason == reasonJobTerminal
	case ErrJobNotTerminal:
		return e.Reason == reasonJobNotTerminal
	case ErrCleanupPending:
		return e.Reason == reasonResultDirty
	case ErrSavepointNotFound:
		return e.Reason == reasonSavepointNotFound
	case ErrSavepointFailed:
		return e.Reason == reasonSavepointFailed
	case ErrCheckpointsUnsupported:
		// Only the checkpoint and savepoint calls are ever unimplemented
		// by a jobplane server.
		return e.Code == connect.CodeUnimplemented
	}
	return false
}

// NotLeaderError is UNAVAILABLE (NOT_LEADER): the server called does not
// lead. A Client follows the leader by itself; this error reaches the
// caller only when no leader answered before the retry policy gave up.
type NotLeaderError struct {
	// Election is the election the server does not lead ("jobmanager"
	// for the public API).
	Election string
	// LeaderAddress is the leader's address, "" when the server did not
	// know it.
	LeaderAddress string
	err           *Error
}

func (e *NotLeaderError) Error() string {
	if e.LeaderAddress == "" {
		return fmt.Sprintf("the server called does not lead %q and knows no leader (NOT_LEADER)", e.Election)
	}
	return fmt.Sprintf("the server called does not lead %q; the leader is at %s (NOT_LEADER)", e.Election, e.LeaderAddress)
}

// Unwrap returns the *Error.
func (e *NotLeaderError) Unwrap() error { return e.err }

// StaleTokenError is ABORTED (STALE_FENCING_TOKEN): a call carried a
// fencing token older than the current grant of its election.
type StaleTokenError struct {
	// Election is the election of the refused token.
	Election string
	// Current is the current grant as the server knows it; nil when it
	// does not.
	Current *jobplanev1.FencingToken
	err     *Error
}

func (e *StaleTokenError) Error() string {
	if e.Current == nil {
		return fmt.Sprintf("stale fencing token for %q (STALE_FENCING_TOKEN)", e.Election)
	}
	return fmt.Sprintf("stale fencing token for %q: the current grant is epoch %d of session %s (STALE_FENCING_TOKEN)", e.Election, e.Current.GetEpoch(), e.Current.GetSessionId())
}

// Unwrap returns the *Error.
func (e *StaleTokenError) Unwrap() error { return e.err }

// DuplicateJobError is ALREADY_EXISTS (JOB_ALREADY_EXISTS): the job id is
// taken by a job with a different plan, or by another principal's job.
// (A resubmission of the same plan by the same principal
// is not an error: Submit answers it with Created false.)
type DuplicateJobError struct {
	// JobID is the id asked for.
	JobID string
	// GloballyTerminated says whether the job holding the id has ended.
	GloballyTerminated bool
	// OtherPrincipal says that the job holding the id was submitted by
	// another principal (on a server that authenticates its clients);
	// nothing else of it is told, GloballyTerminated is false.
	OtherPrincipal bool
	err            *Error
}

func (e *DuplicateJobError) Error() string {
	if e.OtherPrincipal {
		return fmt.Sprintf("job id %q is taken by another principal's job (JOB_ALREADY_EXISTS)", e.JobID)
	}
	state := "still running"
	if e.GloballyTerminated {
		state = "which has ended"
	}
	return fmt.Sprintf("job id %q is taken by a job with a different plan, %s (JOB_ALREADY_EXISTS)", e.JobID, state)
}

// Unwrap returns the *Error.
func (e *DuplicateJobError) Unwrap() error { return e.err }

// Violation is one rule that a request breaks.
type Violation struct {
	// Field is the offending field's path in proto names, such as
	// "job_graph.vertices[2].parallelism".
	Field string
	// Description says what is wrong.
	Description string
}

// InvalidJobError is INVALID_ARGUMENT: the request, usually the JobGraph
// or the job id, breaks the contract's rules. Submit reports a graph that
// breaks them before sending it, with the server's own rules and words.
type InvalidJobError struct {
	// Violations lists every broken rule.
	Violations []Violation
	err        *Error // nil when found before sending
}

func (e *InvalidJobError) Error() string {
	parts := make([]string, len(e.Violations))
	for i, v := range e.Violations {
		parts[i] = v.Field + ": " + v.Description
	}
	return "invalid job: " + strings.Join(parts, "; ")
}

// Unwrap returns the *Error, or nil when the error was found before
// anything was sent.
func (e *InvalidJobError) Unwrap() error {
	if e.err == nil {
		return nil
	}
	return e.err
}

// InvokableNotOfferedError is FAILED_PRECONDITION (INVOKABLE_NOT_OFFERED):
// the new job names invokables that no TaskExecutor registered with the
// cluster offers, so nothing was done. Submit it again once a
// TaskExecutor that offers them has joined (an SDK worker that registered
// them, say, or for exec one allowed to run it). A cluster with no
// TaskExecutor registered at all accepts the job instead, and it waits.
// Servers of contract 1.2 send it; older ones accept such a job, which
// then fails.
type InvokableNotOfferedError struct {
	// Invokables are the invokables not offered, in increasing order.
	Invokables []string
	// Offered are every invokable the registered TaskExecutors offer, in
	// increasing order.
	Offered []string
	// Violations names the invokable field of each vertex that needs one
	// of Invokables, such as "job_graph.vertices[2].invokable".
	Violations []Violation
	err        *Error
}

func (e *InvokableNotOfferedError) Error() string {
	offered := strings.Join(e.Offered, ", ")
	if offered == "" {
		offered = "none"
	}
	return fmt.Sprintf("no TaskExecutor of the cluster offers %s; they offer: %s (INVOKABLE_NOT_OFFERED)", strings.Join(e.Invokables, ", "), offered)
}

// Unwrap returns the *Error.
func (e *InvokableNotOfferedError) Unwrap() error { return e.err }

// splitList splits a comma-separated metadata list; "" is no item.
func splitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// Reason returns the contract's reason of err (from its ErrorInfo), or
// ERROR_REASON_UNSPECIFIED when it carries none.
func Reason(err error) jobplanev1.ErrorReason {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	r, _, _ := apierror.Info(err)
	return r
}

// RetryDelay returns how long the server asked the client to wait before
// retrying the call that failed with err (a google.rpc.RetryInfo detail,
// which jobplane servers send with RESOURCE_EXHAUSTED, reason
// SUBMIT_RATE_EXCEEDED); ok is false when err carries none. A Client
// retries such a call after the delay on its own (see the package
// documentation); the error reaches the caller when the caller's context
// or the retry policy leaves no room for the wait.
func RetryDelay(err error) (delay time.Duration, ok bool) { return apierror.RetryDelay(err) }

// ReasonName returns a reason's name as ErrorInfo carries it, such as
// "JOB_NOT_FOUND".
func ReasonName(r jobplanev1.ErrorReason) string { return apierror.Reason(r) }

// wrap turns a call's error into this package's errors: an *Error, or a
// typed error wrapping one. Errors that are not *connect.Error (a context
// error, say) are returned as they are.
func wrap(err error) error {
	if err == nil {
		return nil
	}
	var already *Error
	if errors.As(err, &already) {
		return err
	}
	var cerr *connect.Error
	if !errors.As(err, &cerr) {
		return err
	}
	reason, md, _ := apierror.Info(cerr)
	e := &Error{Code: cerr.Code(), Reason: reason, Message: cerr.Message(), Metadata: md, cause: cerr}
	switch reason {
	case reasonNotLeader:
		out := &NotLeaderError{Election: md["election"], LeaderAddress: md["leader_address"], err: e}
		if d, ok := apierror.Detail[*jobplanev1.NotLeaderDetails](cerr); ok {
			if a := d.GetLeader().GetAddress(); a != "" {
				out.LeaderAddress = a
			}
			if el := d.GetLeader().GetElection(); el != "" {
				out.Election = el
			}
		}
		return out
	case reasonStaleToken:
		out := &StaleTokenError{Election: md["election"], err: e}
		if d, ok := apierror.Detail[*jobplanev1.StaleTokenDetails](cerr); ok {
			out.Current = d.GetCurrent()
			if d.GetElection() != "" {
				out.Election = d.GetElection()
			}
		} else if ep, perr := strconv.ParseUint(md["current_epoch"], 10, 64); perr == nil && ep != 0 {
			out.Current = &jobplanev1.FencingToken{SessionId: md["current_session_id"], Epoch: ep}
		}
		return out
	case reasonAlreadyExists:
		return &DuplicateJobError{JobID: md["job_id"], GloballyTerminated: md["globally_terminated"] == "true", OtherPrincipal: md["other_principal"] == "true", err: e}
	case reasonInvokableNotOffered:
		out := &InvokableNotOfferedError{Invokables: splitList(md["invokables"]), Offered: splitList(md["offered"]), err: e}
		out.Violations = violations(cerr)
		return out
	case reasonInvalid:
		out := &InvalidJobError{err: e}
		out.Violations = violations(cerr)
		if len(out.Violations) == 0 {
			out.Violations = []Violation{{Field: "request", Description: cerr.Message()}}
		}
		return out
	}
	return e
}

// violations returns the field violations of err's BadRequest detail.
func violations(err *connect.Error) []Violation {
	br, ok := apierror.Detail[*errdetails.BadRequest](err)
	if !ok {
		return nil
	}
	out := make([]Violation, 0, len(br.GetFieldViolations()))
	for _, v := range br.GetFieldViolations() {
		out = append(out, Violation{Field: v.GetField(), Description: v.GetDescription()})
	}
	return out
}

package hastore

import (
	"errors"
	"strings"
)

// Errors returned by every Store implementation. Match them with
// errors.Is; the RPC layer maps each to one wire code and ErrorInfo reason.
var (
	// ErrStaleToken: the fence's token is not its election's current grant.
	ErrStaleToken = errors.New("hastore: stale fencing token")
	// ErrSessionNotFound: the session is unknown, expired or closed.
	ErrSessionNotFound = errors.New("hastore: session not found")
	// ErrCandidacyExists: the session already campaigns in the election.
	ErrCandidacyExists = errors.New("hastore: session already has a candidacy in the election")
	// ErrPlanExists: the job has another execution plan; plans are never
	// replaced.
	ErrPlanExists = errors.New("hastore: another execution plan exists for the job")
	// ErrPlanNotFound: the job has no stored execution plan.
	ErrPlanNotFound = errors.New("hastore: execution plan not found")
	// ErrResultExists: the job already has a result entry.
	ErrResultExists = errors.New("hastore: job result entry exists")
	// ErrResultNotFound: the job has no result entry.
	ErrResultNotFound = errors.New("hastore: job result entry not found")
	// ErrResultDirty: the job's result entry is dirty and may not be deleted.
	ErrResultDirty = errors.New("hastore: job result entry is dirty")
	// ErrPlanNotDeleted: the job's execution plan still exists, so its
	// result entry may not be marked clean or deleted.
	ErrPlanNotDeleted = errors.New("hastore: the job's execution plan is not deleted")
	// ErrInvalidArgument: the input is malformed; the error is a
	// *ValidationError listing each offending field.
	ErrInvalidArgument = errors.New("hastore: invalid argument")
	// ErrUnavailable: the store cannot reach its storage.
	ErrUnavailable = errors.New("hastore: unavailable")
)

// Reasons a leadership ends, as context.Cause of Leadership.Context.
var (
	// ErrResigned: the leader resigned.
	ErrResigned = errors.New("hastore: leadership resigned")
	// ErrSessionEnded: the leader's session expired, was closed, or lost
	// contact with the store for longer than its TTL.
	ErrSessionEnded = errors.New("hastore: session ended")
	// ErrLeaderDeleted: the leader's entry was removed by other means.
	ErrLeaderDeleted = errors.New("hastore: leader entry deleted")
)

// FieldViolation is one offending input field.
type FieldViolation struct {
	// Field is the path of the field in the RPC's proto names, such as
	// "fence.token.epoch" or "plan.job_id".
	Field string
	// Description says what is wrong with it.
	Description string
}

// ValidationError lists the offending fields of a malformed input.
type ValidationError struct {
	Violations []FieldViolation
}

func (e *ValidationError) Error() string {
	var b strings.Builder
	b.WriteString("hastore: invalid argument: ")
	for i, v := range e.Violations {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(v.Field)
		b.WriteString(": ")
		b.WriteString(v.Description)
	}
	return b.String()
}

// Is makes errors.Is(err, ErrInvalidArgument) true for a ValidationError.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalidArgument }

// validation collects field violations.
type validation struct{ violations []FieldViolation }

func (v *validation) add(field, description string) {
	v.violations = append(v.violations, FieldViolation{Field: field, Description: description})
}

// err returns the collected violations as a *ValidationError, or nil.
func (v *validation) err() error {
	if len(v.violations) == 0 {
		return nil
	}
	return &ValidationError{Violations: v.violations}
}

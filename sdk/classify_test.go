package sdk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/durationpb"
)

// answer is a jobplane server's error: a code with its ErrorInfo reason.
func answer(code connect.Code, reason string) error {
	e := connect.NewError(code, errors.New(reason))
	d, _ := connect.NewErrorDetail(&errdetails.ErrorInfo{Domain: apierror.Domain, Reason: reason})
	e.AddDetail(d)
	return e
}

// retryAfterAnswer is a refusal for the submission rate, asking to retry
// after delay.
func retryAfterAnswer(delay time.Duration) error {
	e := answer(connect.CodeResourceExhausted, "SUBMIT_RATE_EXCEEDED").(*connect.Error)
	d, _ := connect.NewErrorDetail(&errdetails.RetryInfo{RetryDelay: durationpb.New(delay)})
	e.AddDetail(d)
	return e
}

func TestRetryDelay(t *testing.T) {
	if d, ok := RetryDelay(wrap(retryAfterAnswer(250 * time.Millisecond))); !ok || d != 250*time.Millisecond {
		t.Errorf("RetryDelay = %v, %v; want 250ms", d, ok)
	}
	if d, ok := RetryDelay(answer(connect.CodeResourceExhausted, "TOO_MANY_JOBS")); ok {
		t.Errorf("RetryDelay of an answer without RetryInfo = %v, want none", d)
	}
}

// A delay the caller's context or the retry policy cannot wait out is not
// waited: the answer comes back at once.
func TestWaitDelayBounded(t *testing.T) {
	// Had a wait been made, it would last until ctx ends, 10s on.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	b := &backoff{policy: RetryPolicy{MaxElapsed: time.Hour}}
	if b.waitDelay(ctx, time.Minute) {
		t.Error("waitDelay past the context's deadline = true, want false")
	}
	short := &backoff{policy: RetryPolicy{MaxElapsed: time.Second}}
	if short.waitDelay(ctx, 5*time.Second) {
		t.Error("waitDelay past MaxElapsed = true, want false")
	}
	if off := (&backoff{disabled: true}); off.waitDelay(ctx, time.Millisecond) {
		t.Error("waitDelay with retries off = true, want false")
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the refused waits took %v, want no wait", took)
	}
	if !b.waitDelay(ctx, time.Millisecond) {
		t.Error("waitDelay within the bounds = false, want true")
	}
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want retryKind
	}{
		{"not leader", answer(connect.CodeUnavailable, "NOT_LEADER"), retryNotLeader},
		{"the leader's store", answer(connect.CodeUnavailable, "PERSIST_FAILED"), retrySame},
		{"unreachable task executor", answer(connect.CodeUnavailable, "TASK_EXECUTOR_UNREACHABLE"), retrySame},
		{"connection refused", connect.NewError(connect.CodeUnavailable, errors.New("dial tcp: connection refused")), retryOther},
		{"attempt timed out", connect.NewError(connect.CodeDeadlineExceeded, errors.New("deadline")), retryOther},
		{"cut mid-answer", connect.NewError(connect.CodeUnknown, fmt.Errorf("read: %w", io.ErrUnexpectedEOF)), retryOther},
		// Seen when a leader was SIGKILLed under a watch stream.
		{"stream cut by the transport", connect.NewError(connect.CodeInternal, errors.New("protocol error: incomplete envelope: http2: client connection force closed via ClientConn.Close")), retryOther},
		{"the server's internal error", answer(connect.CodeInternal, "INTERNAL"), retryNone},
		{"invalid", answer(connect.CodeInvalidArgument, "INVALID_ARGUMENT"), retryNone},
		{"not found", answer(connect.CodeNotFound, "JOB_NOT_FOUND"), retryNone},
		{"duplicate", answer(connect.CodeAlreadyExists, "JOB_ALREADY_EXISTS"), retryNone},
		{"stale token", answer(connect.CodeAborted, "STALE_FENCING_TOKEN"), retryNone},
		{"submission rate, with a delay", retryAfterAnswer(250 * time.Millisecond), retryAfter},
		{"too many streams", answer(connect.CodeResourceExhausted, "TOO_MANY_STREAMS"), retryNone},
		{"too many jobs", answer(connect.CodeResourceExhausted, "TOO_MANY_JOBS"), retryNone},
		{"savepoint failed", answer(connect.CodeAborted, "SAVEPOINT_FAILED"), retryNone},
		{"no such savepoint", answer(connect.CodeNotFound, "SAVEPOINT_NOT_FOUND"), retryNone},
		{"no checkpoints kept", connect.NewError(connect.CodeUnimplemented, errors.New("no checkpoints")), retryNone},
	} {
		if got := classify(tc.err); got != tc.want {
			t.Errorf("%s: classify = %d, want %d", tc.name, got, tc.want)
		}
	}
}

// The sentinels of the 1.2 reasons match by reason, and the Client's
// error for UNIMPLEMENTED is ErrCheckpointsUnsupported.
func TestCheckpointSentinels(t *testing.T) {
	for _, tc := range []struct {
		err    error
		target error
	}{
		{answer(connect.CodeNotFound, "SAVEPOINT_NOT_FOUND"), ErrSavepointNotFound},
		{answer(connect.CodeAborted, "SAVEPOINT_FAILED"), ErrSavepointFailed},
		{connect.NewError(connect.CodeUnimplemented, errors.New("no checkpoints")), ErrCheckpointsUnsupported},
	} {
		for _, other := range []error{ErrSavepointNotFound, ErrSavepointFailed, ErrCheckpointsUnsupported, ErrJobNotFound} {
			if got, want := errors.Is(wrap(tc.err), other), other == tc.target; got != want {
				t.Errorf("errors.Is(%v, %v) = %v, want %v", tc.err, other, got, want)
			}
		}
	}
}

// An attempt of a call that is not idempotent is repeated only when it
// reached no server: a connection that could not be made.
func TestUnsent(t *testing.T) {
	dial := connect.NewError(connect.CodeUnavailable, &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")})
	read := connect.NewError(connect.CodeUnavailable, &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset")})
	if !unsent(dial) || unsent(read) || unsent(answer(connect.CodeUnavailable, "STORE_UNAVAILABLE")) {
		t.Errorf("unsent(dial, read, answer) = %v, %v, %v; want true, false, false", unsent(dial), unsent(read), unsent(answer(connect.CodeUnavailable, "STORE_UNAVAILABLE")))
	}
}

// INVOKABLE_NOT_OFFERED (1.2) decodes into an *InvokableNotOfferedError
// carrying what is missing, what is offered and the vertices' fields, and
// is not retried.
func TestInvokableNotOffered(t *testing.T) {
	e := connect.NewError(connect.CodeFailedPrecondition, errors.New("no registered TaskExecutor offers the invokables exec, nosuch"))
	info, _ := connect.NewErrorDetail(&errdetails.ErrorInfo{Domain: apierror.Domain, Reason: "INVOKABLE_NOT_OFFERED",
		Metadata: map[string]string{"invokables": "exec,nosuch", "offered": "fail,noop,sleep"}})
	br, _ := connect.NewErrorDetail(&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{
		{Field: "job_graph.vertices[1].invokable", Description: `no registered TaskExecutor offers invokable "nosuch"`},
		{Field: "job_graph.vertices[2].invokable", Description: `no registered TaskExecutor offers invokable "exec"`},
	}})
	e.AddDetail(info)
	e.AddDetail(br)

	var got *InvokableNotOfferedError
	if !errors.As(wrap(e), &got) {
		t.Fatalf("wrap = %T (%v), want *InvokableNotOfferedError", wrap(e), wrap(e))
	}
	if !slices.Equal(got.Invokables, []string{"exec", "nosuch"}) || !slices.Equal(got.Offered, []string{"fail", "noop", "sleep"}) {
		t.Errorf("Invokables %q, Offered %q; want [exec nosuch] and [fail noop sleep]", got.Invokables, got.Offered)
	}
	if len(got.Violations) != 2 || got.Violations[0].Field != "job_graph.vertices[1].invokable" || got.Violations[1].Field != "job_graph.vertices[2].invokable" {
		t.Errorf("Violations %+v, want vertices[1] and [2]'s invokable", got.Violations)
	}
	if want := "no TaskExecutor of the cluster offers exec, nosuch; they offer: fail, noop, sleep (INVOKABLE_NOT_OFFERED)"; got.Error() != want {
		t.Errorf("Error() = %q, want %q", got.Error(), want)
	}
	if r := Reason(got); r != reasonInvokableNotOffered {
		t.Errorf("Reason = %v, want INVOKABLE_NOT_OFFERED", r)
	}
	if k := classify(e); k != retryNone {
		t.Errorf("classify = %d, want no retry", k)
	}
	// With nothing offered at all, the lists are empty, not [""].
	bare := answer(connect.CodeFailedPrecondition, "INVOKABLE_NOT_OFFERED")
	if errors.As(wrap(bare), &got); got.Offered != nil || got.Invokables != nil {
		t.Errorf("empty metadata: Invokables %q, Offered %q; want none", got.Invokables, got.Offered)
	}
}

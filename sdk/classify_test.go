package sdk

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
)

// answer is a jobplane server's error: a code with its ErrorInfo reason.
func answer(code connect.Code, reason string) error {
	e := connect.NewError(code, errors.New(reason))
	d, _ := connect.NewErrorDetail(&errdetails.ErrorInfo{Domain: errorDomain, Reason: reason})
	e.AddDetail(d)
	return e
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
	} {
		if got := classify(tc.err); got != tc.want {
			t.Errorf("%s: classify = %d, want %d", tc.name, got, tc.want)
		}
	}
}

package apierror

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
)

// byCode is the reason given to a handler's error that carries none, by
// its code; errors of other codes are left as they are.
var byCode = map[connect.Code]jobplanev1.ErrorReason{
	connect.CodeCanceled:         jobplanev1.ErrorReason_ERROR_REASON_CALL_CANCELED,
	connect.CodeDeadlineExceeded: jobplanev1.ErrorReason_ERROR_REASON_CALL_DEADLINE_EXCEEDED,
	connect.CodeUnimplemented:    jobplanev1.ErrorReason_ERROR_REASON_UNIMPLEMENTED,
	connect.CodeInternal:         jobplanev1.ErrorReason_ERROR_REASON_INTERNAL,
	connect.CodeUnknown:          jobplanev1.ErrorReason_ERROR_REASON_INTERNAL,
}

// Complete returns err with the ErrorInfo error.proto promises on every
// error a handler answers: an error that carries a jobplane ErrorInfo is
// returned as it is; a context error becomes CANCELED or
// DEADLINE_EXCEEDED with its reason; an unimplemented call gets
// UNIMPLEMENTED, and any other error without a code INTERNAL, its detail
// not sent.
func Complete(err error) error {
	if err == nil {
		return nil
	}
	if _, _, ok := Info(err); ok {
		return err
	}
	code := connect.CodeOf(err)
	switch {
	case errors.Is(err, context.Canceled):
		code = connect.CodeCanceled
	case errors.Is(err, context.DeadlineExceeded):
		code = connect.CodeDeadlineExceeded
	}
	reason, ok := byCode[code]
	if !ok {
		return err
	}
	msg := "internal error"
	var cerr *connect.Error
	if code != connect.CodeInternal && code != connect.CodeUnknown {
		msg = err.Error()
		if errors.As(err, &cerr) {
			msg = cerr.Message()
		}
	}
	return New(reason, msg, nil)
}

// Interceptor completes every error a handler answers (see Complete), so
// that a client can tell a jobplane server's answer from a proxy's. It is
// for handlers: on a client it leaves streams alone but rewrites unary
// errors.
func Interceptor() connect.Interceptor { return interceptor{} }

type interceptor struct{}

func (interceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		resp, err := next(ctx, req)
		return resp, Complete(err)
	}
}

func (interceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (interceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		return Complete(next(ctx, conn))
	}
}

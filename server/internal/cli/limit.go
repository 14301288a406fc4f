package cli

import (
	"context"
	"fmt"
	"io"
	"slices"

	"connectrpc.com/connect"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk"
)

// limitReasons are the reasons of a cluster's refusals at a limit: the
// call did nothing.
var limitReasons = []jobplanev1.ErrorReason{
	jobplanev1.ErrorReason_ERROR_REASON_TOO_MANY_STREAMS,
	jobplanev1.ErrorReason_ERROR_REASON_SUBMIT_RATE_EXCEEDED,
	jobplanev1.ErrorReason_ERROR_REASON_TOO_MANY_JOBS,
	jobplanev1.ErrorReason_ERROR_REASON_TOO_MANY_SUBTASKS,
}

// refusedAtLimit reports whether the cluster refused a call at one of its
// limits, having done nothing for it.
func refusedAtLimit(err error) bool {
	return slices.Contains(limitReasons, sdk.Reason(err))
}

// rateNotice tells w, for a client's calls, each time the cluster refused
// a submission for the client's submission rate and said when to retry:
// the SDK waits that long before it retries, and the user sees why the
// submission takes longer.
func rateNotice(w io.Writer) connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			resp, err := next(ctx, req)
			if delay, ok := sdk.RetryDelay(err); ok && sdk.Reason(err) == jobplanev1.ErrorReason_ERROR_REASON_SUBMIT_RATE_EXCEEDED {
				fmt.Fprintf(w, "the cluster limits this client's submission rate; it asks to retry in %v\n", delay)
			}
			return resp, err
		}
	}
}

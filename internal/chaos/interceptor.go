package chaos

import (
	"context"
	"encoding/hex"

	"connectrpc.com/connect"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk"
	"github.com/jobplane/jobplane/sdk/planid"
)

// Interceptor returns a client interceptor that records every SubmitJob,
// CancelJob, GetJob and GetJobResult call made through it, one operation
// per attempt: an SDK client that retries a call records each of its
// attempts, so that a lost answer followed by a retry is seen as what it
// was. Other calls, and streams, pass unrecorded.
//
// Use it with sdk.WithInterceptors.
func (r *Recorder) Interceptor() connect.Interceptor {
	return connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			in, ok := InputOf(req.Any())
			if !ok {
				return next(ctx, req)
			}
			p := r.Call(in)
			resp, err := next(ctx, req)
			var msg any
			if err == nil {
				msg = resp.Any()
			}
			p.Return(OutputOf(msg, err))
			return resp, err
		}
	})
}

// InputOf returns the Input of a Dispatcher request message, and false
// for a request that is not recorded.
func InputOf(req any) (Input, bool) {
	switch m := req.(type) {
	case *jobplanev1.SubmitJobRequest:
		return Input{Op: OpSubmit, JobID: m.GetJobId(), Plan: hex.EncodeToString(planid.Digest(m.GetJobGraph()))}, true
	case *jobplanev1.CancelJobRequest:
		return Input{Op: OpCancel, JobID: m.GetJobId()}, true
	case *jobplanev1.GetJobRequest:
		return Input{Op: OpObserve, JobID: m.GetJobId()}, true
	case *jobplanev1.GetJobResultRequest:
		return Input{Op: OpObserve, JobID: m.GetJobId()}, true
	}
	return Input{}, false
}

// OutputOf returns the Output of a Dispatcher call that answered resp
// (nil on error) or err. See Outcome for how errors are read: only the
// answers that say for certain what happened count; any other error is
// Unknown.
func OutputOf(resp any, err error) Output {
	if err != nil {
		return Output{Outcome: OutcomeOf(err)}
	}
	switch m := resp.(type) {
	case *jobplanev1.SubmitJobResponse:
		return Output{Outcome: OK, Created: m.GetCreated(), Status: m.GetStatus()}
	case *jobplanev1.CancelJobResponse:
		return Output{Outcome: OK, Status: m.GetStatus()}
	case *jobplanev1.GetJobResponse:
		return Output{Outcome: OK, Status: m.GetJob().GetSummary().GetStatus()}
	case *jobplanev1.GetJobResultResponse:
		return Output{Outcome: OK, Status: m.GetResult().GetStatus()}
	}
	return Output{Outcome: Unknown}
}

// OutcomeOf returns the Outcome of a Dispatcher call that failed with
// err: NotFound, JobTerminal, NotTerminal and AlreadyExists for the
// contract's answers with those reasons; Rejected for INVALID_ARGUMENT
// and CANCEL_NOT_RECORDED, which did nothing; Unknown for everything
// else, NOT_LEADER and PERSIST_FAILED included (a leader may lose its
// leadership after its write went through, and a store may apply a
// write late).
func OutcomeOf(err error) Outcome {
	reason := sdk.Reason(err)
	switch connect.CodeOf(err) {
	case connect.CodeNotFound:
		if reason == jobplanev1.ErrorReason_ERROR_REASON_JOB_NOT_FOUND {
			return NotFound
		}
	case connect.CodeFailedPrecondition:
		switch reason {
		case jobplanev1.ErrorReason_ERROR_REASON_JOB_TERMINAL:
			return JobTerminal
		case jobplanev1.ErrorReason_ERROR_REASON_JOB_NOT_TERMINAL:
			return NotTerminal
		}
	case connect.CodeAlreadyExists:
		if reason == jobplanev1.ErrorReason_ERROR_REASON_JOB_ALREADY_EXISTS {
			return AlreadyExists
		}
	case connect.CodeInvalidArgument:
		return Rejected
	case connect.CodeUnavailable:
		if reason == jobplanev1.ErrorReason_ERROR_REASON_CANCEL_NOT_RECORDED {
			return Rejected
		}
	}
	return Unknown
}

package main

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
)

// reasonOf returns the ErrorInfo reason of a jobplane error, or "".
func reasonOf(err error) string {
	var cerr *connect.Error
	if !errors.As(err, &cerr) {
		return ""
	}
	for _, d := range cerr.Details() {
		if info, ok := mustValue(d).(*errdetails.ErrorInfo); ok {
			return info.GetReason()
		}
	}
	return ""
}

func mustValue(d *connect.ErrorDetail) any {
	v, err := d.Value()
	if err != nil {
		return nil
	}
	return v
}

// cancelJob cancels the job, again while the answer is UNAVAILABLE
// (CANCEL_NOT_RECORDED or NOT_LEADER ask for it), up to a deadline.
func cancelJob(ctx context.Context, client jobplanev1connect.DispatcherServiceClient, id string) (*jobplanev1.CancelJobResponse, error) {
	for {
		resp, err := client.CancelJob(ctx, &jobplanev1.CancelJobRequest{JobId: id})
		if connect.CodeOf(err) != connect.CodeUnavailable || ctx.Err() != nil {
			if err != nil {
				return nil, err
			}
			return resp, nil
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Cancels of jobs of one 100ms subtask, sent at times that sweep across
// the subtask's end, on a standalone process: every cancel acknowledged
// ends its job CANCELED, and every one answered FAILED_PRECONDITION
// (JOB_TERMINAL) finds it FINISHED. The store orders the cancel request
// and the job's result, whichever comes first.
func TestCancelNearTheEndOfAJob(t *testing.T) {
	_, client, tr := startStandalone(t, t.TempDir())
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	acked, terminal := 0, 0
	for i := range 40 {
		id := fmt.Sprintf("near-%d", i)
		_, err := client.SubmitJob(ctx, &jobplanev1.SubmitJobRequest{JobId: id, JobGraph: &jobplanev1.JobGraph{
			Name:     id,
			Vertices: []*jobplanev1.JobVertex{{Id: "v", Name: "v", Invokable: "sleep", Parallelism: 1, Config: map[string]string{"duration": "100ms"}}},
		}})
		if err != nil {
			t.Fatalf("submit %s: %v", id, err)
		}
		// The cancel's time is the experiment's input: 50ms to 245ms
		// after the submission's answer, across the subtask's end.
		time.Sleep(time.Duration(50+5*i) * time.Millisecond)
		st, cerr := cancelJob(ctx, client, id)
		res, err := client.GetJobResult(ctx, &jobplanev1.GetJobResultRequest{JobId: id, Wait: true})
		if err != nil {
			t.Fatalf("result of %s: %v", id, err)
		}
		got := res.GetResult().GetStatus()
		switch {
		case cerr == nil:
			acked++
			if got != jobplanev1.JobStatus_JOB_STATUS_CANCELED {
				t.Errorf("%s: cancel answered OK (%v), then the job ended %v; want CANCELED", id, st.GetStatus(), got)
			}
			if s := st.GetStatus(); s == jobplanev1.JobStatus_JOB_STATUS_FINISHED || s == jobplanev1.JobStatus_JOB_STATUS_FAILED {
				t.Errorf("%s: cancel answered OK with %v", id, s)
			}
		case connect.CodeOf(cerr) == connect.CodeFailedPrecondition && reasonOf(cerr) == "JOB_TERMINAL":
			terminal++
			if got != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
				t.Errorf("%s: cancel answered JOB_TERMINAL, then the job ended %v; want FINISHED", id, got)
			}
		default:
			t.Fatalf("%s: cancel: %v", id, cerr)
		}
	}
	t.Logf("%d cancels acknowledged, %d answered JOB_TERMINAL", acked, terminal)
	if acked == 0 {
		t.Error("no cancel was acknowledged: the sweep did not reach the running jobs")
	}
}

package bench

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	"github.com/jobplane/jobplane/gen/jobplane/cluster/v1/clusterv1connect"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
)

// standInID is the stand-in TaskExecutor's id in its reports.
const standInID = "bench-stand-in"

// StandInTaskExecutor is the TaskExecutor of the lifecycle floor: it
// answers SubmitTask at once, checking nothing, and then reports the
// attempt FINISHED to the JobMaster at jmURL with one
// UpdateTaskExecutionState call (h2c). It runs in the bench process, as
// the bench's real TaskExecutors of row 1a do, so that its CPU falls on
// the bench's side of the cost note as theirs does.
type StandInTaskExecutor struct {
	// URL is its endpoint's base URL.
	URL string
	// Failed counts reports that failed; FirstErr keeps the first.
	Failed   atomic.Int64
	firstErr atomic.Pointer[string]

	jm      clusterv1connect.JobMasterServiceClient
	ctx     context.Context
	cancel  context.CancelFunc
	served  chan error
	reports sync.WaitGroup
}

// StartStandInTaskExecutor serves a stand-in TaskExecutor on a free
// loopback port, reporting to the JobMaster at jmURL.
func StartStandInTaskExecutor(jmURL string) (*StandInTaskExecutor, error) {
	srv, err := Listen()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	t := &StandInTaskExecutor{
		URL: srv.URL(), jm: clusterv1connect.NewJobMasterServiceClient(NewHTTPClient(H2C), jmURL),
		ctx: ctx, cancel: cancel, served: make(chan error, 1),
	}
	srv.Handle(clusterv1connect.NewTaskExecutorServiceHandler(standInHandler{t: t}, connect.WithCompressMinBytes(compressMinBytes)))
	go func() { t.served <- srv.Run(ctx) }()
	return t, nil
}

// FirstErr returns how the first failed report failed, or "".
func (t *StandInTaskExecutor) FirstErr() string {
	if p := t.firstErr.Load(); p != nil {
		return *p
	}
	return ""
}

// Stop stops serving and waits for the reports in flight, which it
// cancels.
func (t *StandInTaskExecutor) Stop() {
	t.cancel()
	<-t.served
	t.reports.Wait()
}

// standInHandler serves TaskExecutorService for a StandInTaskExecutor.
type standInHandler struct {
	clusterv1connect.UnimplementedTaskExecutorServiceHandler
	t *StandInTaskExecutor
}

func (h standInHandler) SubmitTask(_ context.Context, req *clusterv1.SubmitTaskRequest) (*clusterv1.SubmitTaskResponse, error) {
	t := h.t
	if t.ctx.Err() != nil {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("stopping"))
	}
	t.reports.Go(func() {
		ctx, cancel := context.WithTimeout(t.ctx, callTimeout)
		defer cancel()
		_, err := t.jm.UpdateTaskExecutionState(ctx, &clusterv1.UpdateTaskExecutionStateRequest{
			JobId: req.GetJobId(), JobMasterToken: req.GetJobMasterToken(), TaskExecutorId: standInID,
			Status: &jobplanev1.TaskExecutionStatus{Attempt: req.GetAttempt(), State: jobplanev1.ExecutionState_EXECUTION_STATE_FINISHED, Time: timestamppb.New(time.Now())},
		})
		if err != nil && t.Failed.Add(1) == 1 {
			msg := err.Error()
			t.firstErr.Store(&msg)
		}
	})
	return &clusterv1.SubmitTaskResponse{}, nil
}

package taskexecutor_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
	"github.com/jobplane/jobplane/server/internal/apierror"
	"github.com/jobplane/jobplane/server/taskexecutor"
)

// heldOffersJobMaster answers the offers of job "warm" at once, with an
// attempt of invokable "record" deployed in the answer, and holds every
// other job's offers unanswered until the call ends: a deployment of
// those jobs can only come with the slot request.
type heldOffersJobMaster struct {
	jobplanev1connect.UnimplementedJobMasterServiceHandler
	// silent has heartbeats and state reports fail: the TaskExecutor
	// hears nothing more from the JobMaster after the warm-up offer's
	// answer.
	silent bool
	// offered, if set, gets the job id of every offer held.
	offered chan string
}

func (j heldOffersJobMaster) OfferSlots(ctx context.Context, req *jobplanev1.OfferSlotsRequest) (*jobplanev1.OfferSlotsResponse, error) {
	if req.GetJobId() != "warm" {
		if j.offered != nil {
			j.offered <- req.GetJobId()
		}
		<-ctx.Done()
		return nil, ctx.Err()
	}
	resp := &jobplanev1.OfferSlotsResponse{Accepted: req.GetOffers(), HeartbeatTimeout: durationpb.New(time.Minute), HeartbeatInterval: durationpb.New(time.Second)}
	for _, o := range req.GetOffers() {
		resp.Deployments = append(resp.Deployments, &jobplanev1.TaskDeployment{
			AllocationId: o.GetAllocationId(), Attempt: &jobplanev1.ExecutionAttemptId{VertexId: "w"}, Invokable: "record",
		})
	}
	return resp, nil
}

func (j heldOffersJobMaster) HeartbeatFromTaskExecutor(context.Context, *jobplanev1.HeartbeatFromTaskExecutorRequest) (*jobplanev1.HeartbeatFromTaskExecutorResponse, error) {
	if j.silent {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("not getting through"))
	}
	return &jobplanev1.HeartbeatFromTaskExecutorResponse{}, nil
}

func (j heldOffersJobMaster) UpdateTaskExecutionStates(context.Context, *jobplanev1.UpdateTaskExecutionStatesRequest) (*jobplanev1.UpdateTaskExecutionStatesResponse, error) {
	if j.silent {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("not getting through"))
	}
	return &jobplanev1.UpdateTaskExecutionStatesResponse{}, nil
}

// A slot request that carries a deployment (as a ResourceManager beside
// the job's JobMaster sends it) runs the attempt once the slot is
// allocated, with no offer of the slot, if the JobMaster's address
// answered this TaskExecutor before: the watchdog's deadline counts from
// then. A deployment whose deadline so counted has passed, or with no
// answer from that address at all, is not taken, and the slot is offered
// (the offer's answer or SubmitTasks brings the attempt again).
func TestDeploymentInASlotRequest(t *testing.T) {
	for _, tc := range []struct {
		name string
		// warm has the JobMaster's address answer an offer (of job
		// "warm", slot 1) first.
		warm bool
		// timeout is the JobMaster's heartbeat timeout that the slot
		// request names.
		timeout time.Duration
		taken   bool
	}{
		{name: "after an answer from the address", warm: true, timeout: time.Minute, taken: true},
		{name: "no answer from the address yet", timeout: time.Minute},
		{name: "deadline from the last answer passed", warm: true, timeout: time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			offered := make(chan string, 4)
			url := serveJobMaster(t, heldOffersJobMaster{offered: offered})
			started := make(chan taskexecutor.Task, 2)
			te := startRunning(t, 2, map[string]taskexecutor.Invokable{
				"record": func(ctx context.Context, task taskexecutor.Task) error {
					started <- task
					<-ctx.Done()
					return ctx.Err()
				},
			})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if tc.warm {
				warmUp(ctx, t, te, url, started)
			}
			attempt := &jobplanev1.ExecutionAttemptId{VertexId: "v"}
			resp, err := te.RequestSlots(ctx, &jobplanev1.RequestSlotsRequest{ResourceManagerToken: token(1), Slots: []*jobplanev1.SlotRequest{{
				SlotIndex: 0, AllocationId: "a", JobId: "j", JobMasterAddress: url, JobMasterToken: token(7),
				Deployment:                &jobplanev1.TaskDeployment{AllocationId: "a", Attempt: attempt, Invokable: "record"},
				JobMasterHeartbeatTimeout: durationpb.New(tc.timeout),
			}}})
			if err != nil {
				t.Fatal(err)
			}
			if said := len(resp.GetDeployed()) == 1 && resp.GetDeployed()[0] == 0; said != tc.taken || len(resp.GetDeployed()) > 1 {
				t.Errorf("the answer's deployed slots %v, want the deployment taken: %v", resp.GetDeployed(), tc.taken)
			}
			// Whether the slot request's attempt holds the slot: another
			// attempt finds it occupied if so.
			_, err = te.SubmitTask(ctx, &jobplanev1.SubmitTaskRequest{
				JobId: "j", JobMasterToken: token(7), AllocationId: "a", HeartbeatTimeout: durationpb.New(time.Minute),
				Attempt: &jobplanev1.ExecutionAttemptId{VertexId: "v", AttemptNumber: 1}, Invokable: "record",
			})
			taken := apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_SLOT_OCCUPIED)
			if !taken && err != nil {
				t.Fatalf("another attempt: %v, want taken or SLOT_OCCUPIED", err)
			}
			if taken != tc.taken {
				t.Fatalf("the slot request's deployment taken: %v, want %v", taken, tc.taken)
			}
			select {
			case task := <-started:
				want := 0 // the attempt in the slot request
				if !tc.taken {
					want = 1 // the other one
				}
				if task.JobID != "j" || task.Attempt != want {
					t.Errorf("started %+v, want job j's attempt %d", task, want)
				}
			case <-ctx.Done():
				t.Fatal("no attempt of job j started within 10s")
			}
			if !tc.taken {
				select {
				case job := <-offered:
					if job != "j" {
						t.Errorf("offered a slot of job %s, want j", job)
					}
				case <-ctx.Done():
					t.Fatal("the slot whose deployment was not taken was not offered within 10s")
				}
			}
		})
	}
}

// warmUp has the JobMaster at url answer an offer of the TaskExecutor (job
// "warm", slot 1), and waits until the answer is in: the attempt it
// carries started.
func warmUp(ctx context.Context, t *testing.T, te jobplanev1connect.TaskExecutorServiceClient, url string, started <-chan taskexecutor.Task) {
	t.Helper()
	if _, err := te.RequestSlots(ctx, &jobplanev1.RequestSlotsRequest{ResourceManagerToken: token(1), Slots: []*jobplanev1.SlotRequest{{
		SlotIndex: 1, AllocationId: "w", JobId: "warm", JobMasterAddress: url, JobMasterToken: token(3),
	}}}); err != nil {
		t.Fatal(err)
	}
	select {
	case task := <-started:
		if task.JobID != "warm" {
			t.Fatalf("started %+v, want job warm's attempt", task)
		}
	case <-ctx.Done():
		t.Fatal("the warm-up offer was not answered within 10s")
	}
}

// The attempt of a slot request is stopped by the JobMaster's heartbeat
// timeout after the last answer from the JobMaster's address, when
// nothing more is heard: its deadline counts from that answer (the
// JobMaster's process heard this TaskExecutor no earlier), not from when
// the slot request came, which is later.
func TestSlotRequestAttemptStopsByTheTimeoutAfterTheLastAnswer(t *testing.T) {
	const (
		timeout = 4 * time.Second
		grace   = 500 * time.Millisecond
		// gap is how much older than the slot request the last answer
		// is: the deadline counted from the slot request would come gap
		// later.
		gap = 2 * time.Second
	)
	url := serveJobMaster(t, heldOffersJobMaster{silent: true})
	started := make(chan taskexecutor.Task, 2)
	stopped := make(chan time.Time, 2)
	te := serveTaskExecutor(t, taskexecutor.Config{Slots: 2, CancelGrace: grace, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Invokables: map[string]taskexecutor.Invokable{
			"record": func(ctx context.Context, task taskexecutor.Task) error {
				started <- task
				<-ctx.Done()
				if task.JobID == "j" {
					stopped <- time.Now()
				}
				return ctx.Err()
			},
		}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	warmUp(ctx, t, te, url, started)
	time.Sleep(gap) // ages the answer; a slower machine only ages it more
	requested := time.Now()
	if _, err := te.RequestSlots(ctx, &jobplanev1.RequestSlotsRequest{ResourceManagerToken: token(1), Slots: []*jobplanev1.SlotRequest{{
		SlotIndex: 0, AllocationId: "a", JobId: "j", JobMasterAddress: url, JobMasterToken: token(7),
		Deployment:                &jobplanev1.TaskDeployment{AllocationId: "a", Attempt: &jobplanev1.ExecutionAttemptId{VertexId: "v"}, Invokable: "record"},
		JobMasterHeartbeatTimeout: durationpb.New(timeout),
	}}}); err != nil {
		t.Fatal(err)
	}
	select {
	case task := <-started:
		if task.JobID != "j" {
			t.Fatalf("started %+v, want job j's attempt", task)
		}
	case <-ctx.Done():
		t.Fatal("the slot request's attempt did not start within 30s")
	}
	select {
	case at := <-stopped:
		// Counted from the slot request, the deadline would be no
		// earlier than this.
		if late := requested.Add(timeout - grace); !at.Before(late) {
			t.Errorf("the attempt stopped %v after the slot request, want before %v: its deadline counted from the slot request, not from the last answer %v before it",
				at.Sub(requested), timeout-grace, gap)
		}
	case <-ctx.Done():
		t.Fatal("the slot request's attempt still runs 30s after its JobMaster fell silent")
	}
}

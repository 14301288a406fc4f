package taskexecutor_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	"github.com/jobplane/jobplane/gen/jobplane/cluster/v1/clusterv1connect"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/taskexecutor"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
)

// jobMaster is a JobMaster that takes every registration and offer, with
// a short heartbeat timeout, and otherwise stays silent.
type jobMaster struct {
	clusterv1connect.UnimplementedJobMasterServiceHandler
	timeout time.Duration
	offers  offerAnswer
	// store, if set, is the TaskExecutor's HA store (startWithJobMaster);
	// else the harness's (serveUnstarted).
	store *taskexecutor.Leaders
	// readOnce gives the TaskExecutor store as an election.Reader too.
	readOnce bool
	// answering says whether the TaskExecutor's heartbeats get through.
	answering atomic.Bool
	// lease, if set, is the lease each heartbeat answer grants.
	lease time.Duration
	// taskLease, if set, is the task lease each heartbeat answer grants;
	// answered counts the heartbeats answered.
	taskLease time.Duration
	answered  atomic.Int32
	mu        sync.Mutex
	reports   []string
	// release, if set, ends unanswered offers once closed.
	release chan struct{}
	// holdEpoch1, if set, holds every state report under epoch 1 until
	// closed, then refuses it NOT_LEADER (STALE_FENCING_TOKEN with
	// refuseStale); held and refused count them.
	holdEpoch1    chan struct{}
	refuseStale   bool
	held, refused atomic.Int32
}

func (j *jobMaster) HeartbeatFromTaskExecutor(context.Context, *clusterv1.HeartbeatFromTaskExecutorRequest) (*clusterv1.HeartbeatFromTaskExecutorResponse, error) {
	if !j.answering.Load() {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("not getting through"))
	}
	resp := &clusterv1.HeartbeatFromTaskExecutorResponse{}
	if j.lease > 0 {
		resp.LeaseRemaining = durationpb.New(j.lease)
	}
	if j.taskLease > 0 {
		resp.TaskLease = durationpb.New(j.taskLease)
	}
	j.answered.Add(1)
	return resp, nil
}

// offerAnswer is how a test JobMaster answers OfferSlots.
type offerAnswer int

const (
	// offerRegisters takes the registration the offer carries and names
	// the heartbeat timeout.
	offerRegisters offerAnswer = iota
	// offerNoTimeout accepts the slots but names no timeout, as a
	// JobMaster that did not register the TaskExecutor would: it must
	// register separately.
	offerNoTimeout
	// offerUnanswered never answers: the TaskExecutor hears the timeout
	// only from the deployment.
	offerUnanswered
)

func (j *jobMaster) RegisterTaskExecutor(context.Context, *clusterv1.JobMasterServiceRegisterTaskExecutorRequest) (*clusterv1.JobMasterServiceRegisterTaskExecutorResponse, error) {
	return &clusterv1.JobMasterServiceRegisterTaskExecutorResponse{HeartbeatTimeout: durationpb.New(j.timeout), HeartbeatInterval: durationpb.New(j.timeout / 5)}, nil
}

func (j *jobMaster) OfferSlots(ctx context.Context, req *clusterv1.OfferSlotsRequest) (*clusterv1.OfferSlotsResponse, error) {
	switch j.offers {
	case offerNoTimeout:
		return &clusterv1.OfferSlotsResponse{Accepted: req.GetOffers()}, nil
	case offerUnanswered:
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-j.release:
			return nil, connect.NewError(connect.CodeUnavailable, errors.New("released"))
		}
	}
	return &clusterv1.OfferSlotsResponse{Accepted: req.GetOffers(), HeartbeatTimeout: durationpb.New(j.timeout), HeartbeatInterval: durationpb.New(j.timeout / 5)}, nil
}

func (j *jobMaster) UpdateTaskExecutionState(_ context.Context, req *clusterv1.UpdateTaskExecutionStateRequest) (*clusterv1.UpdateTaskExecutionStateResponse, error) {
	if j.holdEpoch1 != nil && req.GetJobMasterToken().GetEpoch() == 1 {
		j.held.Add(1)
		<-j.holdEpoch1
		defer j.refused.Add(1)
		if j.refuseStale {
			return nil, apierror.StaleToken("job/"+req.GetJobId(), "s", 2)
		}
		return nil, apierror.NotLeader("job/"+req.GetJobId(), "")
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.reports = append(j.reports, fmt.Sprintf("%s@%d", req.GetStatus().GetState(), req.GetJobMasterToken().GetEpoch()))
	return &clusterv1.UpdateTaskExecutionStateResponse{}, nil
}

// reported returns the states reported so far, as STATE@epoch.
func (j *jobMaster) reported() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.reports)
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) records(t *testing.T) []taskexecutor.AttemptRecord {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []taskexecutor.AttemptRecord
	for _, line := range strings.Split(strings.TrimSpace(b.buf.String()), "\n") {
		if line == "" {
			continue
		}
		var r taskexecutor.AttemptRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// A TaskExecutor that stops hearing from a job's JobMaster stops the job's
// tasks and frees its slots by the JobMaster's heartbeat timeout, so that
// the JobMaster may deploy them elsewhere; while its own calls get
// through (the per-pair heartbeat), the tasks run on. Calls from the
// JobMaster (probes) do not keep them running: the JobMaster counts only
// what it hears from the TaskExecutor. It knows the timeout from the offer's
// answer, from a separate registration, or from the deployment itself,
// which can come before the offer's answer.
func TestTasksStopWhenTheJobMasterFallsSilent(t *testing.T) {
	for name, offers := range map[string]offerAnswer{
		"registered by offering": offerRegisters, "registered separately": offerNoTimeout, "offer unanswered": offerUnanswered,
	} {
		t.Run(name, func(t *testing.T) { testTasksStopWhenSilent(t, offers) })
	}
}

func testTasksStopWhenSilent(t *testing.T, offers offerAnswer) {
	// Long enough that a loaded machine (two CPU hogs beside -race) does
	// not delay heartbeats or a deployment past it: at 600ms, 3 runs in
	// 20 failed that way.
	const timeout = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fake := &jobMaster{timeout: timeout, offers: offers}
	jm, client, log := startWithJobMaster(t, fake)

	slotFree := func() bool { return slotFree(ctx, t, client) }
	heardFirst := []bool{true, false}
	if offers == offerUnanswered {
		heardFirst = []bool{false, false} // its heartbeat interval is never learnt
	}
	for i, heard := range heardFirst {
		alloc := []string{"a", "b"}[i]
		if _, err := client.RequestSlot(ctx, &clusterv1.RequestSlotRequest{
			ResourceManagerToken: token(1), AllocationId: alloc, JobId: "j", JobMasterAddress: jm, JobMasterToken: token(1),
		}); err != nil {
			t.Fatal(err)
		}
		// The deployment names the JobMaster's timeout, as may the answer
		// to the offer or to a registration. A JobMaster that does not
		// register by offering predates the timeout in deployments too.
		deployTimeout := durationpb.New(timeout)
		if offers == offerNoTimeout {
			deployTimeout = nil
		}
		submitted := deploySleep(ctx, t, client, alloc, int32(i), deployTimeout)
		probe := func() {
			if _, err := client.Heartbeat(ctx, &clusterv1.TaskExecutorServiceHeartbeatRequest{Sender: &clusterv1.TaskExecutorServiceHeartbeatRequest_JobMaster{JobMaster: &clusterv1.TaskExecutorServiceHeartbeatRequest_JobMasterSender{JobId: "j", Token: token(1)}}}); err != nil {
				t.Fatal(err)
			}
		}
		early := timeout - 200*time.Millisecond
		if heard {
			// Heartbeats that get through keep the task running for three
			// timeouts.
			fake.answering.Store(true)
			for end := time.Now().Add(3 * timeout); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
				probe()
			}
			if slotFree() {
				t.Fatal("the task of a JobMaster that hears the TaskExecutor was stopped")
			}
			// Then they no longer get through: the JobMaster's probes
			// (calls to the TaskExecutor) go on, but the JobMaster counts
			// only what it hears, and so does the TaskExecutor. The last
			// heartbeat that got through was sent up to an interval
			// (timeout/5) earlier.
			fake.answering.Store(false)
			submitted, early = time.Now(), timeout-timeout/5-200*time.Millisecond
		}
		for !slotFree() {
			probe()
			if time.Since(submitted) > timeout+5*time.Second {
				t.Fatalf("attempt %d: the slot of a silent JobMaster's job still held %v after the last contact", i, time.Since(submitted))
			}
			time.Sleep(10 * time.Millisecond)
		}
		freed := time.Since(submitted)
		var stopped *taskexecutor.AttemptRecord
		for deadline := time.Now().Add(10 * time.Second); stopped == nil && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			for _, r := range log.records(t) {
				if r.Event == "stop" && r.Attempt == i {
					stopped = &r
				}
			}
		}
		if stopped == nil || stopped.State != "EXECUTION_STATE_CANCELED" {
			t.Fatalf("attempt %d: stop record %+v, want CANCELED", i, stopped)
		}
		if freed < early || freed > timeout+time.Second {
			t.Errorf("attempt %d: slot freed %v after the last contact, want about the timeout %v less the cancel grace", i, freed, timeout)
		}
	}
}

// startWithJobMaster starts a one-slot TaskExecutor beside a test
// JobMaster, returning the JobMaster's URL, a client of the TaskExecutor
// and its attempt log.
func startWithJobMaster(t *testing.T, fake *jobMaster) (string, clusterv1connect.TaskExecutorServiceClient, *syncBuffer) {
	t.Helper()
	jm := serveJobMaster(t, fake)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	log := &syncBuffer{}
	cfg := taskexecutor.Config{Slots: 1, CancelGrace: 100 * time.Millisecond, AttemptLog: log, Logger: logger}
	if fake.store != nil {
		cfg.Store = fake.store
		if fake.readOnce {
			cfg.Store = fake.store.Reading()
		}
	}
	client := serveTaskExecutor(t, cfg)
	return jm, client, log
}

// deploySleep deploys an hour-long attempt of job "j" (JobMaster token 1)
// into alloc, retrying until the TaskExecutor takes it (its offer may not
// have registered it yet), and returns when the deployment that was taken
// was sent.
func deploySleep(ctx context.Context, t *testing.T, client clusterv1connect.TaskExecutorServiceClient, alloc string, attempt int32, timeout *durationpb.Duration) time.Time {
	t.Helper()
	for {
		sent := time.Now()
		_, err := client.SubmitTask(ctx, &clusterv1.SubmitTaskRequest{
			JobId: "j", JobMasterToken: token(1), AllocationId: alloc, HeartbeatTimeout: timeout,
			Attempt: &jobplanev1.ExecutionAttemptId{VertexId: "v", AttemptNumber: attempt}, Invokable: "sleep", Config: map[string]string{"duration": "1h"},
		})
		if err == nil {
			return sent
		}
		if ctx.Err() != nil {
			t.Fatalf("SubmitTask: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// slotFree reports whether the TaskExecutor's one slot is free.
func slotFree(ctx context.Context, t *testing.T, client clusterv1connect.TaskExecutorServiceClient) bool {
	t.Helper()
	resp, err := client.Heartbeat(ctx, &clusterv1.TaskExecutorServiceHeartbeatRequest{Sender: &clusterv1.TaskExecutorServiceHeartbeatRequest_ResourceManagerToken{ResourceManagerToken: token(1)}})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetSlotReport().GetSlots()[0].GetAllocationId() == ""
}

// A deployment that comes before the answer to the offer that registered
// the TaskExecutor arms the watchdog from when the offer was sent, not
// from its own arrival: one that arrives later than the JobMaster's
// heartbeat timeout after the offer (the JobMaster may have given the
// TaskExecutor up by then) is refused, and the slot is freed. One that
// names no timeout, with none known, is refused too: nothing could stop
// its attempt.
func TestDeploymentBeforeTheOfferAnswer(t *testing.T) {
	const timeout = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	jm, client, _ := startWithJobMaster(t, &jobMaster{timeout: timeout, offers: offerUnanswered})
	deploy := func(alloc string, timeout *durationpb.Duration) error {
		_, err := client.SubmitTask(ctx, &clusterv1.SubmitTaskRequest{
			JobId: "j", JobMasterToken: token(1), AllocationId: alloc, HeartbeatTimeout: timeout,
			Attempt: &jobplanev1.ExecutionAttemptId{VertexId: "v"}, Invokable: "sleep", Config: map[string]string{"duration": "1h"},
		})
		return err
	}
	if _, err := client.RequestSlot(ctx, &clusterv1.RequestSlotRequest{
		ResourceManagerToken: token(1), AllocationId: "a", JobId: "j", JobMasterAddress: jm, JobMasterToken: token(1),
	}); err != nil {
		t.Fatal(err)
	}
	if err := deploy("a", nil); !apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_NOT_REGISTERED) {
		t.Fatalf("a deployment naming no timeout, with none known: %v, want NOT_REGISTERED", err)
	}
	if slotFree(ctx, t, client) {
		t.Fatal("the refused deployment freed the slot")
	}
	// The offer went out with the allocation; past the timeout since then,
	// the JobMaster may count this TaskExecutor lost.
	time.Sleep(timeout + 50*time.Millisecond)
	if err := deploy("a", durationpb.New(timeout)); !apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_SLOT_NOT_ALLOCATED) {
		t.Fatalf("a deployment arriving past the timeout after the offer: %v, want SLOT_NOT_ALLOCATED (the slot freed first)", err)
	}
	if !slotFree(ctx, t, client) {
		t.Fatal("the slot of a deployment that came too late is still held")
	}
}

// A heartbeat answer that grants a lease shorter than the rest of the
// heartbeat timeout brings the job's deadline forward: once answers stop,
// the tasks stop by the end of the last lease (less the cancel grace),
// not by the timeout, whatever deadline the watchdog waited for before.
func TestTasksStopByTheEndOfTheLease(t *testing.T) {
	const timeout, lease = 10 * time.Second, 2500 * time.Millisecond // heartbeats every timeout/5 = 2s
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fake := &jobMaster{timeout: timeout, offers: offerRegisters, lease: lease}
	fake.answering.Store(true)
	jm, client, _ := startWithJobMaster(t, fake)
	if _, err := client.RequestSlot(ctx, &clusterv1.RequestSlotRequest{
		ResourceManagerToken: token(1), AllocationId: "a", JobId: "j", JobMasterAddress: jm, JobMasterToken: token(1),
	}); err != nil {
		t.Fatal(err)
	}
	deploySleep(ctx, t, client, "a", 0, durationpb.New(timeout))
	// Answered heartbeats (every 2s) keep the task running past a lease.
	time.Sleep(lease + time.Second)
	if slotFree(ctx, t, client) {
		t.Fatal("the task stopped while heartbeats were answered")
	}
	fake.answering.Store(false)
	quiet := time.Now()
	for !slotFree(ctx, t, client) {
		if waited := time.Since(quiet); waited > lease+time.Second {
			t.Fatalf("slot still held %v after heartbeats stopped being answered; the last lease was %v", waited, lease)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

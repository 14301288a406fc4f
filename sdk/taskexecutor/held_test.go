package taskexecutor_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	"github.com/jobplane/jobplane/gen/jobplane/cluster/v1/clusterv1connect"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/taskexecutor"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
)

// heldSetup runs an hour-long attempt of job "j" under JobMaster token 1,
// whose heartbeat answers grant taskLease, and waits until an answer
// vouched for the job.
func heldSetup(ctx context.Context, t *testing.T, taskLease time.Duration) (jm string, client clusterv1connect.TaskExecutorServiceClient, log *syncBuffer, fake *jobMaster) {
	t.Helper()
	fake = &jobMaster{timeout: time.Second, offers: offerRegisters, taskLease: taskLease}
	jm, client, log = deployTo(ctx, t, fake)
	return jm, client, log, fake
}

// deployTo starts a TaskExecutor with fake as job "j"'s JobMaster (token
// 1), runs an hour-long attempt there, and waits until a heartbeat
// answer vouched for the job.
func deployTo(ctx context.Context, t *testing.T, fake *jobMaster) (jm string, client clusterv1connect.TaskExecutorServiceClient, log *syncBuffer) {
	t.Helper()
	fake.answering.Store(true)
	jm, client, log = startWithJobMaster(t, fake)
	if _, err := client.RequestSlot(ctx, &clusterv1.RequestSlotRequest{
		ResourceManagerToken: token(1), AllocationId: "a", JobId: "j", JobMasterAddress: jm, JobMasterToken: token(1),
	}); err != nil {
		t.Fatal(err)
	}
	deploySleep(ctx, t, client, "a", 0, durationpb.New(time.Second))
	twoHeartbeats(ctx, t, fake, "since the deployment")
	return jm, client, log
}

// twoHeartbeats waits until fake answered two more heartbeats: whatever
// the TaskExecutor did before the first was settled before the second
// was sent.
func twoHeartbeats(ctx context.Context, t *testing.T, fake *jobMaster, since string) {
	t.Helper()
	for base := fake.answered.Load(); fake.answered.Load() < base+2; time.Sleep(10 * time.Millisecond) {
		if ctx.Err() != nil {
			t.Fatal("no heartbeat answered " + since)
		}
	}
}

// atLeastOne waits until n is positive.
func atLeastOne(ctx context.Context, t *testing.T, n *atomic.Int32, what string) {
	t.Helper()
	for n.Load() == 0 {
		if ctx.Err() != nil {
			t.Fatal(what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// newerJobMaster makes token 2 the job's by a fenced call of its own.
func newerJobMaster(ctx context.Context, t *testing.T, client clusterv1connect.TaskExecutorServiceClient) {
	t.Helper()
	if _, err := client.CancelTask(ctx, &clusterv1.CancelTaskRequest{
		JobId: "j", JobMasterToken: token(2), Attempt: &jobplanev1.ExecutionAttemptId{VertexId: "other"},
	}); err != nil {
		t.Fatalf("CancelTask under the newer token: %v", err)
	}
}

func adopt(ctx context.Context, client clusterv1connect.TaskExecutorServiceClient, jm string, epoch uint64) (*clusterv1.AdoptAttemptsResponse, error) {
	return client.AdoptAttempts(ctx, &clusterv1.AdoptAttemptsRequest{Jobs: []*clusterv1.JobAdoption{
		{JobId: "j", JobMasterToken: token(epoch), JobMasterAddress: jm},
	}})
}

// Under a task lease, a newer JobMaster of the job does not cancel the
// older one's attempt: it keeps running, held, and AdoptAttempts moves it
// to the newer token in one step, after which the older token is refused
// for it and the newer one acts on it.
func TestHeldAttemptIsAdopted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	jm, client, log, fake := heldSetup(ctx, t, 30*time.Second)
	newerJobMaster(ctx, t, client)
	// Past the older JobMaster's heartbeat timeout (1s): held, not stopped.
	time.Sleep(1500 * time.Millisecond)
	if slotFree(ctx, t, client) || stopped(t, log) {
		t.Fatalf("the older JobMaster's attempt stopped as a newer one appeared, under a task lease: %+v", log.records(t))
	}
	resp, err := adopt(ctx, client, jm, 2)
	if err != nil {
		t.Fatalf("AdoptAttempts: %v", err)
	}
	check := func(resp *clusterv1.AdoptAttemptsResponse) {
		t.Helper()
		if len(resp.GetRefused()) > 0 || len(resp.GetJobs()) != 1 {
			t.Fatalf("AdoptAttempts = %v, want one job, nothing refused", resp)
		}
		got := resp.GetJobs()[0]
		if len(got.GetAttempts()) != 1 || len(got.GetAllocationIds()) != 1 || got.GetAllocationIds()[0] != "a" {
			t.Fatalf("adopted %v, want the one attempt in allocation a", got)
		}
		a := got.GetAttempts()[0]
		if a.GetAllocationId() != "a" || a.GetStatus().GetAttempt().GetVertexId() != "v" ||
			a.GetStatus().GetState() != jobplanev1.ExecutionState_EXECUTION_STATE_RUNNING || a.GetDeployedUnder().GetEpoch() != 1 {
			t.Fatalf("adopted attempt %v, want v's RUNNING attempt deployed under epoch 1", a)
		}
	}
	check(resp)
	resp, err = adopt(ctx, client, jm, 2) // idempotent
	if err != nil {
		t.Fatalf("AdoptAttempts again: %v", err)
	}
	check(resp)
	resp, err = adopt(ctx, client, jm, 1)
	if err != nil || len(resp.GetRefused()) != 1 || resp.GetRefused()[0].GetReason() != jobplanev1.ErrorReason_ERROR_REASON_STALE_FENCING_TOKEN {
		t.Fatalf("AdoptAttempts under the older token = %v, %v; want it refused STALE_FENCING_TOKEN", resp, err)
	}
	// The older token can no longer touch it; the newer one can.
	_, err = client.CancelTask(ctx, &clusterv1.CancelTaskRequest{JobId: "j", JobMasterToken: token(1), Attempt: &jobplanev1.ExecutionAttemptId{VertexId: "v"}})
	if !apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_STALE_FENCING_TOKEN) {
		t.Fatalf("CancelTask under the older token: %v, want STALE_FENCING_TOKEN", err)
	}
	if slotFree(ctx, t, client) {
		t.Fatal("the adopted attempt stopped")
	}
	if _, err := client.CancelTask(ctx, &clusterv1.CancelTaskRequest{JobId: "j", JobMasterToken: token(2), Attempt: &jobplanev1.ExecutionAttemptId{VertexId: "v"}}); err != nil {
		t.Fatalf("CancelTask under the adopting token: %v", err)
	}
	// Its end is reported to the adopting JobMaster, under its token.
	for !slices.Contains(fake.reported(), "EXECUTION_STATE_CANCELED@2") {
		if ctx.Err() != nil {
			t.Fatalf("reported %v; want the adopted attempt's CANCELED under epoch 2 (%+v)", fake.reported(), log.records(t))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A held attempt that no JobMaster adopts stops once the task lease of the
// last answer under its token has ended, while the job itself, heard
// under the newer token, goes on; without a task lease, a newer JobMaster
// cancels it at once, and AdoptAttempts lists nothing of it.
func TestHeldAttemptStopsAtItsLease(t *testing.T) {
	for _, tc := range []struct {
		name      string
		taskLease time.Duration
	}{{"lease", 2 * time.Second}, {"no lease", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			jm, client, log, _ := heldSetup(ctx, t, tc.taskLease)
			newerJobMaster(ctx, t, client)
			for !stopped(t, log) {
				if ctx.Err() != nil {
					t.Fatalf("the unadopted attempt still runs: %+v", log.records(t))
				}
				time.Sleep(10 * time.Millisecond)
			}
			resp, err := adopt(ctx, client, jm, 2)
			if err != nil || len(resp.GetJobs()) != 1 || len(resp.GetJobs()[0].GetAttempts()) != 0 {
				t.Fatalf("AdoptAttempts after the attempt stopped = %v, %v; want nothing to adopt", resp, err)
			}
		})
	}
}

func TestAdoptAttemptsRefusesBadEntries(t *testing.T) {
	ctx := context.Background()
	_, client, _ := startWithJobMaster(t, &jobMaster{timeout: time.Second})
	for name, req := range map[string]*clusterv1.AdoptAttemptsRequest{
		"no jobs":    {},
		"no token":   {Jobs: []*clusterv1.JobAdoption{{JobId: "j", JobMasterAddress: "http://127.0.0.1:1"}}},
		"no address": {Jobs: []*clusterv1.JobAdoption{{JobId: "j", JobMasterToken: token(1)}}},
		"no job":     {Jobs: []*clusterv1.JobAdoption{{JobMasterToken: token(1), JobMasterAddress: "http://127.0.0.1:1"}}},
	} {
		if _, err := client.AdoptAttempts(ctx, req); !apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_INVALID_ARGUMENT) {
			t.Errorf("%s: %v, want INVALID_ARGUMENT", name, err)
		}
	}
}

// stopped says whether the attempt log records a stop.
func stopped(t *testing.T, log *syncBuffer) bool {
	for _, r := range log.records(t) {
		if r.Event == "stop" {
			return true
		}
	}
	return false
}

// An adopted attempt runs as long as it was held, even before its
// adopting JobMaster answered a heartbeat (which grants a lease of its
// own): when a yet newer JobMaster appears meanwhile, the attempt is held
// again for it, not canceled, and it adopts it in turn.
func TestAdoptedAttemptIsHeldBeforeItsLease(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	leaders := taskexecutor.NewLeaders(grant(1))
	leaders.GrantJob("j", grant(2))
	fake := &jobMaster{timeout: time.Second, offers: offerRegisters, taskLease: 30 * time.Second, store: leaders}
	jm, client, log := deployTo(ctx, t, fake)
	newerJobMaster(ctx, t, client)
	// Adopted by a JobMaster that never answers a heartbeat.
	const silent = "http://127.0.0.1:1"
	if resp, err := adopt(ctx, client, silent, 2); err != nil || len(resp.GetJobs()[0].GetAttempts()) != 1 {
		t.Fatalf("AdoptAttempts under epoch 2 = %v, %v; want the attempt", resp, err)
	}
	leaders.GrantJob("j", grant(3))
	resp, err := adopt(ctx, client, jm, 3)
	if err != nil || len(resp.GetRefused()) > 0 || len(resp.GetJobs()[0].GetAttempts()) != 1 {
		t.Fatalf("AdoptAttempts under epoch 3 = %v, %v; want the attempt adopted again", resp, err)
	}
	if stopped(t, log) {
		t.Fatalf("the adopted attempt stopped as a newer JobMaster appeared: %+v", log.records(t))
	}
}

// A state report sent to the older JobMaster, held there while a newer
// JobMaster adopts the attempt, and then refused STALE_FENCING_TOKEN, does not
// cancel the attempt: the answer comes from a JobMaster that no longer
// has it, and the attempt's state went to the new one with the adoption.
func TestStaleRefusalDoesNotCancelAnAdoptedAttempt(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fake := &jobMaster{timeout: time.Second, offers: offerRegisters, taskLease: 30 * time.Second, holdEpoch1: make(chan struct{}), refuseStale: true}
	jm, client, log := deployTo(ctx, t, fake)
	atLeastOne(ctx, t, &fake.held, "no state report reached the older JobMaster")
	newerJobMaster(ctx, t, client)
	if resp, err := adopt(ctx, client, jm, 2); err != nil || len(resp.GetJobs()) != 1 || len(resp.GetJobs()[0].GetAttempts()) != 1 {
		t.Fatalf("AdoptAttempts = %v, %v; want the one attempt adopted", resp, err)
	}
	close(fake.holdEpoch1)
	atLeastOne(ctx, t, &fake.refused, "the held report was not answered")
	// Two heartbeat answers later the refusal has been acted on; a cancel
	// would have freed the slot and reported CANCELED under epoch 2.
	twoHeartbeats(ctx, t, fake, "since the refusal")
	if slotFree(ctx, t, client) || stopped(t, log) || slices.Contains(fake.reported(), "EXECUTION_STATE_CANCELED@2") {
		t.Fatalf("the adopted attempt stopped on the older JobMaster's refusal of a report it no longer owned: reported %v, %+v", fake.reported(), log.records(t))
	}
}

// A state report refused NOT_LEADER by the attempt's own JobMaster, no
// newer one having appeared, does not cancel the attempt under a task
// lease: a JobMaster deposed under a lease leaves its attempts to its
// successor, which adopts them (as the reference server's does when its
// leadership flaps right after a deployment). Canceling it would hand the
// successor a CANCELED attempt, which fails the job.
func TestDeposedRefusalUnderLeaseKeepsTheAttempt(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fake := &jobMaster{timeout: time.Second, offers: offerRegisters, taskLease: 30 * time.Second, holdEpoch1: make(chan struct{})}
	jm, client, log := deployTo(ctx, t, fake)
	atLeastOne(ctx, t, &fake.held, "no state report reached the JobMaster")
	close(fake.holdEpoch1) // the JobMaster, deposed, refuses it NOT_LEADER
	atLeastOne(ctx, t, &fake.refused, "the held report was not answered")
	// Two heartbeat answers later the refusal has been acted on; a
	// cancel would have stopped the attempt within the cancel grace.
	twoHeartbeats(ctx, t, fake, "since the refusal")
	if slotFree(ctx, t, client) || stopped(t, log) {
		t.Fatalf("the attempt stopped on its deposed JobMaster's NOT_LEADER under a task lease: reported %v, %+v", fake.reported(), log.records(t))
	}
	// The successor adopts it, running.
	newerJobMaster(ctx, t, client)
	resp, err := adopt(ctx, client, jm, 2)
	if err != nil || len(resp.GetJobs()) != 1 || len(resp.GetJobs()[0].GetAttempts()) != 1 ||
		resp.GetJobs()[0].GetAttempts()[0].GetStatus().GetState() != jobplanev1.ExecutionState_EXECUTION_STATE_RUNNING {
		t.Fatalf("AdoptAttempts = %v, %v; want the one attempt adopted RUNNING", resp, err)
	}
}

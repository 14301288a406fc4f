package taskexecutor_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/taskexecutor"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
)

// TriggerCheckpoint asks each running attempt's task for its state once
// per checkpoint id, answers with the state its task gave (or, for a task
// that registered nothing, the state it was restored from), and declines
// for attempts it does not run.
func TestTriggerCheckpoint(t *testing.T) {
	t.Parallel()
	var snapshots atomic.Int32
	restored := make(chan *taskexecutor.State, 1)
	registered := make(chan struct{})
	client := serveTaskExecutor(t, taskexecutor.Config{
		Slots: 3, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Invokables: map[string]taskexecutor.Invokable{
			"stateful": func(ctx context.Context, task taskexecutor.Task) error {
				restored <- task.Restored
				task.OnCheckpoint(func(_ context.Context, id uint64) (taskexecutor.State, error) {
					snapshots.Add(1)
					if id == 13 {
						return taskexecutor.State{}, errors.New("not now")
					}
					return taskexecutor.State{Data: []byte("snap-" + strconv.FormatUint(id, 10))}, nil
				})
				close(registered)
				<-ctx.Done()
				return nil
			},
			"blocks": func(ctx context.Context, _ taskexecutor.Task) error { <-ctx.Done(); return nil },
		},
	})
	ctx := context.Background()
	deploy := func(slot int32, vertex, invokable string, state *jobplanev1.SubtaskState) {
		t.Helper()
		alloc := "alloc-" + vertex
		if _, err := client.RequestSlot(ctx, &clusterv1.RequestSlotRequest{
			ResourceManagerToken: token(1), SlotIndex: slot, AllocationId: alloc, JobId: "j",
			JobMasterAddress: "http://127.0.0.1:1", JobMasterToken: token(2),
		}); err != nil {
			t.Fatalf("RequestSlot: %v", err)
		}
		if _, err := client.SubmitTask(ctx, &clusterv1.SubmitTaskRequest{
			JobId: "j", JobMasterToken: token(2), AllocationId: alloc, HeartbeatTimeout: jmTimeout,
			Attempt: &jobplanev1.ExecutionAttemptId{VertexId: vertex}, Invokable: invokable,
			RestoredState: state, RestoredFrom: "5",
		}); err != nil {
			t.Fatalf("SubmitTask: %v", err)
		}
	}
	inline := func(vertex, data string) *jobplanev1.SubtaskState {
		return &jobplanev1.SubtaskState{VertexId: vertex, State: &jobplanev1.SubtaskState_Inline{Inline: []byte(data)}}
	}
	deploy(0, "s", "stateful", inline("s", "from-5"))
	deploy(1, "b", "blocks", inline("b", "b-from-5"))
	if got := <-restored; got == nil || string(got.Data) != "from-5" {
		t.Fatalf("the task was restored from %+v; want the deployment's state from-5", got)
	}
	<-registered
	trigger := func(id uint64, epoch uint64, vertices ...string) (*clusterv1.TriggerCheckpointResponse, error) {
		req := &clusterv1.TriggerCheckpointRequest{JobId: "j", JobMasterToken: token(epoch), CheckpointId: id}
		for _, v := range vertices {
			req.Attempts = append(req.Attempts, &jobplanev1.ExecutionAttemptId{VertexId: v})
		}
		var resp *clusterv1.TriggerCheckpointResponse
		var err error
		// Until every deployed attempt runs (each task is asked once per
		// checkpoint id, so asking again changes nothing for those that
		// answered).
		waitFor(t, "the attempts to run", func() bool {
			resp, err = client.TriggerCheckpoint(ctx, req)
			if err != nil {
				return true
			}
			for _, a := range resp.GetAcks() {
				if a.GetAttempt().GetVertexId() != "absent" && strings.Contains(a.GetDeclined(), "not running") {
					return false
				}
			}
			return true
		})
		return resp, err
	}
	resp, err := trigger(7, 2, "s", "b", "absent")
	if err != nil {
		t.Fatalf("TriggerCheckpoint: %v", err)
	}
	acks := resp.GetAcks()
	if len(acks) != 3 || string(acks[0].GetState().GetInline()) != "snap-7" || acks[0].GetState().GetVertexId() != "s" ||
		string(acks[1].GetState().GetInline()) != "b-from-5" || acks[2].GetDeclined() == "" {
		t.Fatalf("acks = %v; want snap-7 from s, b's restored state (it registered nothing), and a decline for the absent attempt", acks)
	}
	again, err := trigger(7, 2, "s")
	if err != nil || string(again.GetAcks()[0].GetState().GetInline()) != "snap-7" || snapshots.Load() != 1 {
		t.Fatalf("a repeated trigger of 7 = %v, %v after %d snapshots; want the first answer, the task asked once", again, err, snapshots.Load())
	}
	declined, err := trigger(13, 2, "s")
	if err != nil || !strings.Contains(declined.GetAcks()[0].GetDeclined(), "not now") {
		t.Fatalf("checkpoint 13 = %v, %v; want declined with the task's error", declined, err)
	}
	if _, err := client.TriggerCheckpoint(ctx, &clusterv1.TriggerCheckpointRequest{
		JobId: "j", JobMasterToken: token(1), CheckpointId: 14, Attempts: []*jobplanev1.ExecutionAttemptId{{VertexId: "s"}},
	}); !apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_STALE_FENCING_TOKEN) {
		t.Fatalf("a trigger from an older JobMaster = %v; want STALE_FENCING_TOKEN", err)
	}
	if _, err := client.TriggerCheckpoint(ctx, &clusterv1.TriggerCheckpointRequest{JobId: "j", JobMasterToken: token(2)}); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("a trigger without id or attempts = %v; want INVALID_ARGUMENT", err)
	}
}

// The built-in count goes on from its restored count and keeps its
// growing count in checkpoints.
func TestCountInvokableRestores(t *testing.T) {
	t.Parallel()
	client := serveTaskExecutor(t, taskexecutor.Config{Slots: 1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx := context.Background()
	if _, err := client.RequestSlot(ctx, &clusterv1.RequestSlotRequest{
		ResourceManagerToken: token(1), AllocationId: "a", JobId: "j", JobMasterAddress: "http://127.0.0.1:1", JobMasterToken: token(1),
	}); err != nil {
		t.Fatalf("RequestSlot: %v", err)
	}
	if _, err := client.SubmitTask(ctx, &clusterv1.SubmitTaskRequest{
		JobId: "j", JobMasterToken: token(1), AllocationId: "a", HeartbeatTimeout: jmTimeout,
		Attempt: &jobplanev1.ExecutionAttemptId{VertexId: "c"}, Invokable: "count", Config: map[string]string{"to": "1000000", "every": "10ms"},
		RestoredState: &jobplanev1.SubtaskState{VertexId: "c", State: &jobplanev1.SubtaskState_Inline{Inline: []byte("41")}}, RestoredFrom: "3",
	}); err != nil {
		t.Fatalf("SubmitTask: %v", err)
	}
	var counts []int
	id := uint64(4)
	waitFor(t, "the count task to count past its restored count", func() bool {
		id++
		resp, err := client.TriggerCheckpoint(ctx, &clusterv1.TriggerCheckpointRequest{
			JobId: "j", JobMasterToken: token(1), CheckpointId: id, Attempts: []*jobplanev1.ExecutionAttemptId{{VertexId: "c"}},
		})
		if err != nil {
			t.Fatalf("TriggerCheckpoint: %v", err)
		}
		if resp.GetAcks()[0].GetDeclined() != "" {
			return false // not running yet
		}
		n, err := strconv.Atoi(string(resp.GetAcks()[0].GetState().GetInline()))
		if err != nil {
			t.Fatalf("the count task's state %v: %v", resp.GetAcks()[0], err)
		}
		counts = append(counts, n)
		return n > 41
	})
	if counts[0] < 41 {
		t.Fatalf("the count task's states = %v; want each at least 41, the count it was restored from", counts)
	}
}

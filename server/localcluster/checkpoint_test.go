package localcluster_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
	"github.com/jobplane/jobplane/sdk/worker"
	"github.com/jobplane/jobplane/server/localcluster"
)

// counter is a Func that counts, one step per millisecond, from its
// restored count, and gives its count at each checkpoint. What each
// attempt started from and gave is recorded.
type counter struct {
	mu       sync.Mutex
	restored map[[2]int]*worker.State // by (subtask, attempt)
	from     map[[2]int]string
	given    map[[2]int][]int64
	// failAfter, if positive, fails attempt 0 of subtask 0 once it gave
	// its state this many times (so at least failAfter-1 checkpoints
	// ended before it fails).
	failAfter int
	to        int64
}

func newCounter(failAfter int, to int64) *counter {
	return &counter{restored: map[[2]int]*worker.State{}, from: map[[2]int]string{}, given: map[[2]int][]int64{}, failAfter: failAfter, to: to}
}

func (c *counter) run(ctx context.Context, task worker.Task) error {
	key := [2]int{task.SubtaskIndex, task.Attempt}
	var n atomic.Int64
	if task.Restored != nil {
		v, err := strconv.ParseInt(string(task.Restored.Data), 10, 64)
		if err != nil {
			return err
		}
		n.Store(v)
	}
	gave := make(chan struct{}, 1000)
	c.mu.Lock()
	c.restored[key], c.from[key] = task.Restored, task.RestoredFrom
	c.mu.Unlock()
	task.OnCheckpoint(func(_ context.Context, _ uint64) (worker.State, error) {
		v := n.Load()
		c.mu.Lock()
		c.given[key] = append(c.given[key], v)
		c.mu.Unlock()
		gave <- struct{}{}
		return worker.State{Data: []byte(strconv.FormatInt(v, 10))}, nil
	})
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	times := 0
	for n.Load() < c.to {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-gave:
			if times++; c.failAfter > 0 && times >= c.failAfter && key == [2]int{0, 0} {
				return errors.New("attempt 0 fails after its checkpoints")
			}
		case <-tick.C:
			n.Add(1)
		}
	}
	return nil
}

func checkpointed(interval time.Duration) *jobplanev1.JobConfig {
	cfg := fixedDelay(3)
	cfg.Checkpoints = &jobplanev1.CheckpointConfig{Interval: durationpb.New(interval)}
	return cfg
}

// A restarted subtask starts from its state in the latest completed
// checkpoint: never from scratch, never from a state newer than what its
// failed attempt gave. The job's details count the checkpoints.
func TestCheckpointRestore(t *testing.T) {
	cnt := newCounter(3, 400)
	c := start(t, localcluster.Config{TaskExecutors: 1, Slots: 2, Functions: map[string]worker.Func{"count": cnt.run}})
	g := oneVertex("count", 2)
	g.Config = checkpointed(20 * time.Millisecond)
	res := execute(t, c, g)
	if res.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("status %v (%v), want FINISHED", res.GetStatus(), res.GetFailure())
	}
	cnt.mu.Lock()
	defer cnt.mu.Unlock()
	first, second := [2]int{0, 0}, [2]int{0, 1}
	given := cnt.given[first]
	restored := cnt.restored[second]
	if restored == nil || cnt.from[second] == "" {
		t.Fatalf("attempt 1 of subtask 0 started from %v (checkpoint %q); want its state in the latest completed checkpoint (attempt 0 gave %v)", restored, cnt.from[second], given)
	}
	v, err := strconv.ParseInt(string(restored.Data), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	// Attempt 0 gave its state len(given) times; every checkpoint but the
	// last had ended before the next was triggered, and the last may
	// have been discarded when the attempt failed: the restored count is
	// one of the first len(given)-1 states, or the last.
	if v < given[0] || v > given[len(given)-1] {
		t.Fatalf("attempt 1 restored %d; attempt 0 gave %v", v, given)
	}
	if cnt.restored[first] != nil {
		t.Fatalf("attempt 0 started from %v; want nothing (no checkpoint before the job's first run)", cnt.restored[first])
	}
}

// A savepoint stops a job, belongs to the user, and a new job starts from
// it; a deleted savepoint cannot be restored from.
func TestSavepointStopAndRestore(t *testing.T) {
	cnt := newCounter(0, 1<<40) // never ends by itself
	c := start(t, localcluster.Config{TaskExecutors: 1, Slots: 2, Functions: map[string]worker.Func{"count": cnt.run}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d := c.Dispatcher()
	ov, err := d.GetClusterOverview(ctx, &jobplanev1.GetClusterOverviewRequest{})
	if err != nil || ov.GetLimits().GetMaxInlineStateBytes() <= 0 || ov.GetLimits().GetMaxCheckpointBytes() < ov.GetLimits().GetMaxInlineStateBytes() {
		t.Fatalf("GetClusterOverview limits = %v, %v; want the inline state and checkpoint limits of a server that keeps checkpoints", ov.GetLimits(), err)
	}
	g := oneVertex("count", 1)
	if _, err := d.SubmitJob(ctx, &jobplanev1.SubmitJobRequest{JobId: "first", JobGraph: g}); err != nil {
		t.Fatal(err)
	}
	var resp *jobplanev1.TriggerSavepointResponse
	waitUntil(t, "a savepoint of the running job", func() bool {
		var err error
		resp, err = d.TriggerSavepoint(ctx, &jobplanev1.TriggerSavepointRequest{JobId: "first", Stop: true})
		if err != nil && !apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_SAVEPOINT_FAILED) {
			t.Fatalf("TriggerSavepoint: %v", err)
		}
		return err == nil
	})
	sp := resp.GetSavepoint()
	res, err := d.GetJobResult(ctx, &jobplanev1.GetJobResultRequest{JobId: "first", Wait: true})
	if err != nil || res.GetResult().GetStatus() != jobplanev1.JobStatus_JOB_STATUS_CANCELED {
		t.Fatalf("the stopped job's result = %v, %v; want CANCELED", res, err)
	}
	cnt.mu.Lock()
	given := cnt.given[[2]int{0, 0}]
	cnt.mu.Unlock()
	if sp.GetJobId() != "first" || sp.GetCheckpoint().GetSubtaskStates() != 1 || len(given) == 0 {
		t.Fatalf("savepoint %v (the task gave %v); want one of job first with one subtask's state", sp, given)
	}
	list, err := d.ListSavepoints(ctx, &jobplanev1.ListSavepointsRequest{JobId: "first"})
	if err != nil || len(list.GetSavepoints()) != 1 || list.GetSavepoints()[0].GetSavepointId() != sp.GetSavepointId() {
		t.Fatalf("ListSavepoints = %v, %v; want the savepoint, kept after its job ended", list, err)
	}

	g2 := oneVertex("count", 1)
	g2.Config = &jobplanev1.JobConfig{RestoreFromSavepoint: sp.GetSavepointId()}
	if _, err := d.SubmitJob(ctx, &jobplanev1.SubmitJobRequest{JobId: "second", JobGraph: g2}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the second job's task to start", func() bool {
		cnt.mu.Lock()
		defer cnt.mu.Unlock()
		return cnt.from[[2]int{0, 0}] != "" // the second job's first attempt
	})
	if _, err := d.CancelJob(ctx, &jobplanev1.CancelJobRequest{JobId: "second"}); err != nil {
		t.Fatal(err)
	}
	cnt.mu.Lock()
	var restoredFrom string
	var restored *worker.State
	for key, from := range cnt.from {
		if from != "" {
			restoredFrom, restored = from, cnt.restored[key]
		}
	}
	cnt.mu.Unlock()
	if restoredFrom != sp.GetSavepointId() || restored == nil || string(restored.Data) != strconv.FormatInt(given[len(given)-1], 10) {
		t.Fatalf("the second job started from %v of %q; want the savepoint's state %d", restored, restoredFrom, given[len(given)-1])
	}

	if _, err := d.DeleteSavepoint(ctx, &jobplanev1.DeleteSavepointRequest{SavepointId: sp.GetSavepointId()}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.DeleteSavepoint(ctx, &jobplanev1.DeleteSavepointRequest{SavepointId: sp.GetSavepointId()}); err != nil {
		t.Fatalf("deleting it again: %v; want success", err)
	}
	_, err = d.SubmitJob(ctx, &jobplanev1.SubmitJobRequest{JobId: "third", JobGraph: g2})
	if !apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_SAVEPOINT_NOT_FOUND) || connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("a job restoring from the deleted savepoint = %v; want NOT_FOUND (SAVEPOINT_NOT_FOUND)", err)
	}
}

// waitUntil polls cond until it holds, failing the test after 20s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Checkpoints that fail in a row past the tolerated number restart the
// job's subtasks, and the failure says why; declined checkpoints count
// as failed.
func TestCheckpointTolerableFailures(t *testing.T) {
	var declined atomic.Int32
	c := start(t, localcluster.Config{TaskExecutors: 1, Slots: 1, Functions: map[string]worker.Func{
		"decliner": func(ctx context.Context, task worker.Task) error {
			if task.Attempt > 0 {
				return nil
			}
			task.OnCheckpoint(func(context.Context, uint64) (worker.State, error) {
				declined.Add(1)
				return worker.State{}, errors.New("not now")
			})
			<-ctx.Done() // only a restart ends it
			return ctx.Err()
		},
	}})
	g := oneVertex("decliner", 1)
	g.Config = checkpointed(20 * time.Millisecond)
	tolerated := int32(2)
	g.Config.Checkpoints.TolerableFailures = &tolerated
	res := execute(t, c, g)
	if res.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Fatalf("status %v (%v), want FINISHED once attempt 1 ran", res.GetStatus(), res.GetFailure())
	}
	if n := declined.Load(); n != 3 {
		t.Errorf("attempt 0 declined %d checkpoints; want 3 (2 tolerated, the third restarts the job)", n)
	}
	found := false
	for _, e := range res.GetExceptionHistory() {
		found = found || strings.Contains(e.GetMessage(), "3 checkpoints failed in a row")
	}
	if !found {
		t.Errorf("exception history %v; want the restart's cause: 3 checkpoints failed in a row", res.GetExceptionHistory())
	}
}

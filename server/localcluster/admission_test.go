package localcluster_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
	"github.com/jobplane/jobplane/sdk/worker"
	"github.com/jobplane/jobplane/server/localcluster"
)

// Past the admission window, a submitted job waits with no leadership
// (so no JobMaster) and shows INITIALIZING; a canceled one ends CANCELED
// at once; and the oldest waiting job launches as soon as a launched one
// first deploys, while the jobs launched before it still wait for slots.
// Closing the cluster with jobs waiting ends them all (the test's cleanup
// would hang otherwise). A job waiting for a seat keeps no plan: its
// output is asked of the store's (a wrong vertex or subtask is still
// told), and it runs on the plan read back once it launches.
func TestJobsPastTheAdmissionWindowWaitWithoutALeadership(t *testing.T) {
	started := make(chan string, 8)
	c := startBlocking(t, localcluster.Config{AdmissionWindow: 2}, started)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	d := c.Dispatcher()
	submit := func(id string) {
		t.Helper()
		if _, err := d.SubmitJob(ctx, &jobplanev1.SubmitJobRequest{JobId: id, JobGraph: oneVertex("block", 1)}); err != nil {
			t.Fatalf("submit %s: %v", id, err)
		}
	}
	leader := func(id string) election.Token {
		t.Helper()
		l, err := c.Store().Leader(ctx, election.Job(id))
		if err != nil {
			t.Fatalf("leader of %s: %v", id, err)
		}
		return l.Token
	}
	status := func(id string) jobplanev1.JobStatus {
		t.Helper()
		res, err := d.GetJob(ctx, &jobplanev1.GetJobRequest{JobId: id})
		if err != nil {
			t.Fatalf("GetJob %s: %v", id, err)
		}
		return res.GetJob().GetSummary().GetStatus()
	}
	waitStarted := func(want string) {
		t.Helper()
		select {
		case got := <-started:
			if got != want {
				t.Fatalf("job %s started, want %s", got, want)
			}
		case <-ctx.Done():
			t.Fatalf("job %s did not start", want)
		}
	}
	eventually := func(what string, ok func() bool) {
		t.Helper()
		for !ok() {
			select {
			case <-ctx.Done():
				t.Fatalf("%s: not within the test's deadline", what)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}

	// a takes the only slot, and gives its seat back as it deploys.
	submit("a")
	waitStarted("a")
	// b and c take the window's two seats and wait for slots; d and e
	// wait for a seat.
	for _, id := range []string{"b", "c", "d", "e"} {
		submit(id)
	}
	eventually("b and c lead", func() bool { return !leader("b").IsZero() && !leader("c").IsZero() })
	for _, id := range []string{"d", "e"} {
		if tok := leader(id); !tok.IsZero() {
			t.Errorf("job %s past the window leads with %v; want no leadership", id, tok)
		}
		if st := status(id); st != jobplanev1.JobStatus_JOB_STATUS_INITIALIZING {
			t.Errorf("job %s past the window is %v; want INITIALIZING", id, st)
		}
	}
	if st := status("b"); st != jobplanev1.JobStatus_JOB_STATUS_RUNNING {
		t.Errorf("job b in the window is %v; want RUNNING (waiting for slots)", st)
	}
	for _, tc := range []struct {
		name   string
		req    *jobplanev1.GetTaskOutputRequest
		code   connect.Code
		reason jobplanev1.ErrorReason
	}{
		{"its vertex", &jobplanev1.GetTaskOutputRequest{JobId: "d", VertexId: "v"},
			connect.CodeNotFound, jobplanev1.ErrorReason_ERROR_REASON_EXECUTION_NOT_FOUND},
		{"an unknown vertex", &jobplanev1.GetTaskOutputRequest{JobId: "d", VertexId: "nope"},
			connect.CodeInvalidArgument, jobplanev1.ErrorReason_ERROR_REASON_INVALID_ARGUMENT},
		{"a subtask out of range", &jobplanev1.GetTaskOutputRequest{JobId: "d", VertexId: "v", SubtaskIndex: 1},
			connect.CodeInvalidArgument, jobplanev1.ErrorReason_ERROR_REASON_INVALID_ARGUMENT},
	} {
		_, err := d.GetTaskOutput(ctx, tc.req)
		if connect.CodeOf(err) != tc.code || !apierror.Is(err, tc.reason) {
			t.Errorf("output of %s of d, waiting for a seat: %v, want %v %v", tc.name, err, tc.code, tc.reason)
		}
	}

	// A job waiting for a seat ends CANCELED when canceled, without
	// waiting for one.
	if _, err := d.CancelJob(ctx, &jobplanev1.CancelJobRequest{JobId: "e"}); err != nil {
		t.Fatal(err)
	}
	res, err := c.Client().Wait(ctx, "e")
	if err != nil || res.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_CANCELED {
		t.Fatalf("e: %v, %v; want CANCELED", res.GetStatus(), err)
	}
	if tok := leader("d"); !tok.IsZero() {
		t.Errorf("d leads with %v after e's cancel; want it still waiting for a seat", tok)
	}

	// a's end frees the slot for b; b's first deployment frees its seat
	// for d, while c still waits for a slot.
	if _, err := d.CancelJob(ctx, &jobplanev1.CancelJobRequest{JobId: "a"}); err != nil {
		t.Fatal(err)
	}
	waitStarted("b")
	eventually("d leads once b deployed", func() bool { return !leader("d").IsZero() })
	eventually("d's JobMaster runs it, on its plan read back", func() bool { return status("d") == jobplanev1.JobStatus_JOB_STATUS_RUNNING })
	if st := status("c"); st != jobplanev1.JobStatus_JOB_STATUS_RUNNING {
		t.Errorf("c is %v; want RUNNING (still waiting for slots)", st)
	}
	// c and d hold the seats: f waits for one as the cluster closes.
	submit("f")
	if tok := leader("f"); !tok.IsZero() {
		t.Errorf("f leads with %v; want it waiting for a seat", tok)
	}
}

// The slot timeout bounds a job's whole wait for slots: the time it waited
// for a seat in the admission window counts, so a job that waited longer
// than the timeout fails as soon as it launches, with the cause, rather
// than a whole timeout later.
func TestSlotTimeoutCountsTheWaitForASeat(t *testing.T) {
	const timeout = 3 * time.Second
	started := make(chan string, 4)
	c := startBlocking(t, localcluster.Config{AdmissionWindow: 1, SlotTimeout: timeout}, started)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	d := c.Dispatcher()
	for _, id := range []string{"a", "b", "c"} {
		if _, err := d.SubmitJob(ctx, &jobplanev1.SubmitJobRequest{JobId: id, JobGraph: oneVertex("block", 1)}); err != nil {
			t.Fatalf("submit %s: %v", id, err)
		}
		if id == "a" {
			// a holds the only slot before b and c come.
			select {
			case <-started:
			case <-ctx.Done():
				t.Fatal("a did not start")
			}
		}
	}
	// b waits for a slot in the window's seat, c for the seat. b fails
	// after the timeout; c, launched then, has waited as long.
	resB, err := c.Client().Wait(ctx, "b")
	if err != nil || resB.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FAILED {
		t.Fatalf("b: %v, %v; want FAILED", resB.GetStatus(), err)
	}
	resC, err := c.Client().Wait(ctx, "c")
	if err != nil || resC.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FAILED {
		t.Fatalf("c: %v, %v; want FAILED", resC.GetStatus(), err)
	}
	if !strings.Contains(resC.GetFailure().GetMessage(), "no slots") {
		t.Errorf("c failed with %q; want the slot timeout's cause", resC.GetFailure().GetMessage())
	}
	if gap := resC.GetEndTime().AsTime().Sub(resB.GetEndTime().AsTime()); gap > timeout/2 {
		t.Errorf("c failed %v after b; want at once (its wait for a seat counts against its slot timeout of %v)", gap, timeout)
	}
}

// startBlocking starts a cluster of cfg with one TaskExecutor of one slot,
// whose invokable "block" sends its job's id on started once it runs, and
// runs until canceled.
func startBlocking(t *testing.T, cfg localcluster.Config, started chan<- string) *localcluster.Cluster {
	t.Helper()
	cfg.TaskExecutors, cfg.Slots = 1, 1
	cfg.Functions = map[string]worker.Func{
		"block": func(ctx context.Context, task worker.Task) error {
			started <- task.JobID
			<-ctx.Done()
			return ctx.Err()
		},
	}
	return start(t, cfg)
}

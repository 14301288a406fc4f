package runner

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/proto"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/server/hastore"
)

// raceCases put two things at the same moment that the other cases keep
// apart: a cancellation and the job's end, a leadership lost and found
// again in quick succession while jobs run, and a crash between two steps
// of a job's cleanup.
var raceCases = []Case{
	{Name: "races/cancel-against-finish", Requires: []string{FeatureResourceManager},
		Doc: "CancelJob sent as the job's tasks finish (the cancel first, both at once, the cancel as the last task reports FINISHED, and the cancel once the result is written; twice each): a CancelJob answered CANCELLING or CANCELED ends the job CANCELED, one answered FAILED_PRECONDITION (JOB_TERMINAL) leaves it as the error says, never CANCELED, and the result, once served, never changes",
		Run: cancelAgainstFinish},
	{Name: "races/leadership-flapping", Requires: []string{FeatureResourceManager},
		Doc: "the server's `jobmanager` leadership revoked and granted again four times in quick succession while jobs are submitted and run: while deposed the server answers NOT_LEADER to every call; every acknowledged job ends FINISHED, its result written once, and no subtask runs twice at once",
		Run: leadershipFlapping},
	{Name: "races/kill-between-result-and-plan-delete", Requires: []string{FeatureResourceManager, featureRunnerStarts},
		Doc: "SIGKILL of the server after a job's dirty result was written and before its plan was deleted, and, for another job, after the plan was deleted and before the result was marked clean; restarted, the server finishes both cleanups (plan deleted, result marked clean), runs neither job again, and serves the results that were written",
		Run: killBetweenResultAndPlanDelete},
}

// cancelOrders are the orders in which cancelAgainstFinish sends CancelJob
// and lets a job's tasks finish.
var cancelOrders = []string{"cancel-first", "together", "reported-first", "after-result"}

func cancelAgainstFinish(t *T) {
	const rounds = 2
	for round := range rounds {
		ids := make([]string, len(cancelOrders))
		t.setup(func() {
			for i, order := range cancelOrders {
				ids[i] = t.job(fmt.Sprintf("%s-%d", order, round))
				t.mustSubmit(ids[i], gatedGraph(1, ids[i]))
			}
			for _, id := range ids {
				t.waitRunning(id, 1)
			}
		})
		var wg sync.WaitGroup
		for i, order := range cancelOrders {
			wg.Add(1)
			go func() {
				defer wg.Done()
				t.cancelAsTasksFinish(ids[i], order)
			}()
		}
		wg.Wait()
	}
}

// cancelAsTasksFinish cancels the job and opens its gate in the order
// given, then checks that the job's end agrees with CancelJob's answer.
func (t *T) cancelAsTasksFinish(id, order string) {
	d := t.dispatcher()
	cancel := func() (*jobplanev1.CancelJobResponse, error) {
		var resp *jobplanev1.CancelJobResponse
		var err error
		// UNAVAILABLE (CANCEL_NOT_RECORDED, or a change of leader) says
		// nothing was done: a client cancels again.
		for range 20 {
			ctx, stop := context.WithTimeout(t.ctx, 30*time.Second)
			resp, err = d.CancelJob(ctx, &jobplanev1.CancelJobRequest{JobId: id})
			stop()
			if connect.CodeOf(err) != connect.CodeUnavailable {
				break
			}
			d = t.dispatcher()
		}
		return resp, err
	}
	var (
		resp *jobplanev1.CancelJobResponse
		err  error
	)
	switch order {
	case "cancel-first":
		resp, err = cancel()
		t.env.open(id)
	case "together":
		start := make(chan struct{})
		opened := make(chan struct{})
		go func() {
			<-start
			t.env.open(id)
			close(opened)
		}()
		close(start)
		resp, err = cancel()
		<-opened
	case "reported-first":
		// The cancel as the JobMaster learns that the last task
		// finished: the job's end and the cancel request meet.
		t.env.open(id)
		if !t.wait(30*time.Second, func() bool {
			return len(t.env.log.Events(func(e Event) bool {
				return e.Key == id && e.Op == "UpdateTaskExecutionState" && e.State == jobplanev1.ExecutionState_EXECUTION_STATE_FINISHED && strings.HasPrefix(e.Attempt, "sink/")
			})) > 0
		}) {
			t.Errorf("job %s: its task did not report FINISHED within 30s of its gate opening; expected it to finish", id)
			return
		}
		resp, err = cancel()
	case "after-result":
		t.env.open(id)
		if !t.wait(30*time.Second, func() bool { return firstApplied(t.events(id, "create-dirty"), "create-dirty") >= 0 }) {
			t.Errorf("job %s: no result written within 30s of its tasks' gate opening; expected it to finish", id)
			return
		}
		resp, err = cancel()
	}
	what := fmt.Sprintf("job %s (%s)", id, order)
	r := t.result(id)
	final := r.GetStatus()
	switch {
	case err == nil:
		st := resp.GetStatus()
		if st != jobplanev1.JobStatus_JOB_STATUS_CANCELLING && st != jobplanev1.JobStatus_JOB_STATUS_CANCELED {
			t.Errorf("%s: CancelJob answered %v; expected CANCELLING or CANCELED (CancelJobResponse.status)", what, st)
		}
		if final != jobplanev1.JobStatus_JOB_STATUS_CANCELED {
			t.Errorf("%s: CancelJob answered %v, and the job ended %v; expected a job whose CancelJob succeeded to end CANCELED (DispatcherService.CancelJob, since 1.2)", what, st, final)
		}
		if order == "after-result" {
			t.Errorf("%s: CancelJob answered %v after the job's %v result was written; expected FAILED_PRECONDITION (JOB_TERMINAL): the result came first", what, st, final)
		}
	case reason(err) == "JOB_TERMINAL" && connect.CodeOf(err) == connect.CodeFailedPrecondition:
		info, _ := errorDetail[*errdetails.ErrorInfo](err)
		named := info.GetMetadata()["status"]
		if final == jobplanev1.JobStatus_JOB_STATUS_CANCELED || named != final.String() {
			t.Errorf("%s: CancelJob answered JOB_TERMINAL (status %q), and the job ended %v; expected a job refused as terminal to keep the status the error names, never CANCELED", what, named, final)
		}
		if order == "cancel-first" {
			t.Errorf("%s: CancelJob answered %v while the job's tasks were held running; expected CANCELLING or CANCELED", what, err)
		}
	default:
		t.Errorf("%s: CancelJob answered %v; expected CANCELLING, CANCELED or FAILED_PRECONDITION (JOB_TERMINAL)", what, err)
	}
	if final != jobplanev1.JobStatus_JOB_STATUS_CANCELED && final != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Errorf("%s: the job ended %v (%s); expected CANCELED or FINISHED", what, final, r.GetFailure().GetMessage())
	}
	// The result, once served, is the job's for good: asked again it is
	// the same, and so is the job's status (terminal-is-final checks
	// every status the case was answered).
	if again := t.result(id); !proto.Equal(again, r) {
		t.Errorf("%s: GetJobResult answered %v, then %v; expected the same result every time", what, r, again)
	}
	if st := t.status(id); st != final {
		t.Errorf("%s: GetJob answered %v after the result %v; expected the result's status", what, st, final)
	}
}

// leadershipFlapping revokes the server's `jobmanager` leadership four
// times, each time holding the server's next campaign until the case has
// asked the deposed server one of each kind of call, with jobs submitted
// before each revocation and one let finish during each.
func leadershipFlapping(t *T) {
	const flaps = 4
	leader, _ := t.leaderProc()
	deposed := t.env.dispatcherAt(leader.url)
	var ids []string
	for i := range flaps {
		id := t.job(fmt.Sprintf("j%d", i))
		t.mustSubmit(id, gatedGraph(1, id))
		ids = append(ids, id)
		if i > 0 {
			t.env.open(ids[i-1])
		}
		t.status(id)
		hold := make(chan struct{})
		from := t.env.log.Len()
		t.env.store.arm(fault{op: "campaign", key: election.JobManager, hold: hold})
		old, err := t.env.revoke(t.ctx, election.JobManager)
		if err != nil {
			close(hold)
			t.Fatalf("revoke: %v", err)
		}
		// The server campaigns again once it took the leadership as
		// ended: from then on it is deposed, and knows it.
		if !t.wait(t.waits.revoke, func() bool {
			return len(t.env.log.Events(func(e Event) bool {
				return e.Seq > from && e.Source == "store" && e.Op == "campaign" && e.Key == election.JobManager
			})) > 0
		}) {
			close(hold)
			t.Fatalf("flap %d: the server did not campaign for %s again within %v of its leadership %s being revoked; expected it to take the leadership as ended and campaign again", i, election.JobManager, t.waits.revoke, old)
		}
		t.deposedAnswersNotLeader(deposed, i, ids)
		close(hold)
	}
	t.env.open(ids[len(ids)-1])
	for _, id := range ids {
		if r := t.result(id); r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
			t.Errorf("job %s ended %v (%s); expected FINISHED", id, r.GetStatus(), r.GetFailure().GetMessage())
		}
		if n := len(ok(t.events(id, "create-dirty"))); n != 1 {
			t.Errorf("job %s: its result written %d times; expected once, whatever leader wrote it", id, n)
		}
	}
}

// deposedAnswersNotLeader asks a deposed Dispatcher one call of each kind
// about known and unknown jobs; each must be NOT_LEADER.
func (t *T) deposedAnswersNotLeader(d jobplanev1connect.DispatcherServiceClient, flap int, ids []string) {
	ctx, cancel := context.WithTimeout(t.ctx, 10*time.Second)
	defer cancel()
	known, unknown := ids[len(ids)-1], t.job(fmt.Sprintf("deposed-%d", flap))
	calls := []struct {
		name string
		call func() error
	}{
		{"GetJob of an acknowledged job", func() error {
			_, err := d.GetJob(ctx, &jobplanev1.GetJobRequest{JobId: known})
			return err
		}},
		{"GetJobResult of an acknowledged job", func() error {
			_, err := d.GetJobResult(ctx, &jobplanev1.GetJobResultRequest{JobId: ids[0]})
			return err
		}},
		{"SubmitJob of a new job", func() error {
			_, err := d.SubmitJob(ctx, &jobplanev1.SubmitJobRequest{JobId: unknown, JobGraph: noopGraph(1)})
			return err
		}},
		{"CancelJob of an unknown job", func() error {
			_, err := d.CancelJob(ctx, &jobplanev1.CancelJobRequest{JobId: unknown})
			return err
		}},
	}
	for _, c := range calls {
		if err := c.call(); !isNotLeader(err) {
			t.Errorf("flap %d: %s, while the server was deposed (its campaign held in the store), answered %v; expected UNAVAILABLE (NOT_LEADER): only the leader of %s answers (DispatcherService)", flap, c.name, errString(err), election.JobManager)
		}
	}
}

// errString is err's text, or "OK".
func errString(err error) string {
	if err == nil {
		return "OK"
	}
	return err.Error()
}

// killBetweenResultAndPlanDelete kills the server in the middle of two
// jobs' cleanups: one held after its dirty result (its plan delete fails
// until the kill), one after its plan delete (its clean mark fails until
// the kill), and checks what the restarted server does with them.
func killBetweenResultAndPlanDelete(t *T) {
	// Job "a" stops before its plan delete; job "b" before its clean mark.
	a, b := t.job("a"), t.job("b")
	hold := make(chan struct{})
	defer close(hold)
	t.env.store.arm(fault{op: "delete-plan", key: a, hold: hold, before: hastore.ErrUnavailable})
	t.env.store.arm(fault{op: "mark-clean", key: b, hold: hold, before: hastore.ErrUnavailable})
	written := map[string]*jobplanev1.JobResult{}
	t.setup(func() {
		for _, id := range []string{a, b} {
			t.mustSubmit(id, noopGraph(2))
		}
		steps := map[string]string{a: "create-dirty", b: "delete-plan"}
		for id, op := range steps {
			if !t.wait(30*time.Second, func() bool { return firstApplied(t.events(id, op), op) >= 0 }) {
				t.Fatalf("job %s: no %s took effect within 30s; expected the job to finish and its cleanup to begin", id, op)
			}
		}
		ctx, cancel := context.WithTimeout(t.ctx, 10*time.Second)
		defer cancel()
		for _, id := range []string{a, b} {
			e, err := t.env.etcd.GetJobResultEntry(ctx, id)
			if err != nil || e.GetState() != hastorev1.JobResultState_JOB_RESULT_STATE_DIRTY {
				t.Fatalf("job %s: result entry %v, %v; expected the dirty result it just wrote", id, e, err)
			}
			written[id] = e.GetResult()
		}
	})
	leader, _ := t.leaderProc()
	t.killLeader(leader)
	killed := t.env.log.Len()
	// A step the killed server had not begun yet is not held for the
	// restarted one.
	t.env.store.disarm("delete-plan", a)
	t.env.store.disarm("mark-clean", b)
	if _, err := t.env.startServer(0); err != nil {
		t.Fatalf("restart: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.ctx, t.waits.result)
	defer cancel()
	for _, id := range []string{a, b} {
		after := func(op string) []Event {
			return t.env.log.Events(func(e Event) bool { return e.Seq > killed && e.Key == id && e.Op == op && e.Applied })
		}
		if !t.wait(t.waits.failover, func() bool { return len(after("mark-clean")) > 0 }) {
			t.Errorf("job %s: its dirty result was not marked clean within %v of the restart; expected the next leader to finish the cleanup the killed one began", id, t.waits.failover)
			continue
		}
		if id == a && len(after("delete-plan")) == 0 {
			t.Errorf("job %s: its plan was not deleted after the restart; expected the next leader to delete it before marking the result clean", id)
		}
		if _, err := t.env.etcd.GetExecutionPlan(ctx, id); !errors.Is(err, hastore.ErrPlanNotFound) {
			t.Errorf("job %s: GetExecutionPlan after the cleanup answered %v; expected the plan deleted", id, err)
		}
		if r := t.result(id); !proto.Equal(r, written[id]) {
			t.Errorf("job %s: GetJobResult answered %v after the restart; expected the result written before the kill, %v", id, r, written[id])
		}
	}
	t.barrier() // a run of either job started after the restart would show by now
	for _, id := range []string{a, b} {
		for _, op := range []string{"campaign", "RequestSlot", "SubmitTask"} {
			if evs := t.env.log.Events(func(e Event) bool { return e.Seq > killed && e.Key == id && e.Op == op }); len(evs) > 0 {
				t.Errorf("%v after the restart; expected a job with a result never to run again", evs[0])
			}
		}
	}
}

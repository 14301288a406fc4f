package runner

import (
	"context"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/durationpb"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
)

// restartCases check what contract 1.2 says of restarts: a restart
// strategy states its bound, and a watcher sees every restart.
var restartCases = []Case{
	{Name: "lifecycle/restart-bound-explicit",
		Doc: "a fixed or exponential delay with attempts 0 (unlimited before 1.2) is INVALID_ARGUMENT naming its attempts field, one with attempts and unlimited names unlimited, and unlimited alone runs", Run: restartBoundExplicit},
	{Name: "lifecycle/watch-reports-restarts", Requires: []string{FeatureResourceManager},
		Doc: "WatchJob sends a message when a task failure restarts part of a job (its restart_count grown, with the failure), although the job stays RUNNING", Run: watchReportsRestarts},
	{Name: "lifecycle/unasked-cancel-is-a-failure", Requires: []string{FeatureResourceManager},
		Doc: "an attempt its TaskExecutor reports CANCELED although its JobMaster never asked (the runner's TaskExecutor reports the attempt's failure so) is a task failure: under NoRestart the job ends FAILED, with the failure, and the subtask is not deployed again", Run: unaskedCancelIsAFailure},
}

// withRestart returns g with the restart strategy rs.
func withRestart(g *jobplanev1.JobGraph, rs *jobplanev1.RestartStrategy) *jobplanev1.JobGraph {
	g.Config = &jobplanev1.JobConfig{RestartStrategy: rs}
	return g
}

func fixedDelay(fd *jobplanev1.RestartStrategy_FixedDelay) *jobplanev1.RestartStrategy {
	return &jobplanev1.RestartStrategy{Strategy: &jobplanev1.RestartStrategy_FixedDelay_{FixedDelay: fd}}
}

func restartBoundExplicit(t *T) {
	expo := &jobplanev1.RestartStrategy{Strategy: &jobplanev1.RestartStrategy_ExponentialDelay_{ExponentialDelay: &jobplanev1.RestartStrategy_ExponentialDelay{
		InitialDelay: durationpb.New(time.Second), MaxDelay: durationpb.New(time.Minute)}}}
	for _, tc := range []struct {
		name  string
		rs    *jobplanev1.RestartStrategy
		field string // the suffix of the field violation's path
	}{
		{"a fixed delay of attempts 0", fixedDelay(&jobplanev1.RestartStrategy_FixedDelay{}), "fixed_delay.attempts"},
		{"an exponential delay of attempts 0", expo, "exponential_delay.attempts"},
		{"a fixed delay of attempts 2 and unlimited", fixedDelay(&jobplanev1.RestartStrategy_FixedDelay{Attempts: 2, Unlimited: true}), "fixed_delay.unlimited"},
	} {
		_, err := t.submit(t.job("bad"), withRestart(noopGraph(1), tc.rs))
		br, _ := errorDetail[*errdetails.BadRequest](err)
		named := false
		for _, v := range br.GetFieldViolations() {
			named = named || strings.HasSuffix(v.GetField(), tc.field)
		}
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !named {
			t.Errorf("a job with %s answered %v; expected INVALID_ARGUMENT with a field violation naming %s", tc.name, err, tc.field)
		}
	}
	id := t.job("unlimited")
	t.mustSubmit(id, withRestart(noopGraph(1), fixedDelay(&jobplanev1.RestartStrategy_FixedDelay{Unlimited: true})))
	if r := t.result(id); r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
		t.Errorf("a job with an unlimited fixed delay ended %v; expected FINISHED", r.GetStatus())
	}
}

// watchReportsRestarts runs two regions, a counter and a gate: the
// counter fails once when the case opens its fail gate, which restarts
// its region alone, and the watch must report that restart before the
// job goes on to its end.
func watchReportsRestarts(t *T) {
	id := t.job("j")
	g := &jobplanev1.JobGraph{Name: "region-restart", Vertices: []*jobplanev1.JobVertex{
		{Id: "flaky", Invokable: "counter", Parallelism: 1, Config: map[string]string{"gate": id, "fail": id + "-fail"}},
		{Id: "steady", Invokable: "gate", Parallelism: 1, Config: map[string]string{"gate": id}},
	}}
	t.mustSubmit(id, withRestart(g, fixedDelay(&jobplanev1.RestartStrategy_FixedDelay{Attempts: 1})))
	ctx, cancel := context.WithTimeout(t.ctx, 60*time.Second)
	defer cancel()
	stream, err := t.dispatcher().WatchJob(ctx, &jobplanev1.WatchJobRequest{JobId: id})
	if err != nil {
		t.Fatalf("WatchJob: %v", err)
	}
	defer stream.Close()
	summaries := make(chan *jobplanev1.JobSummary)
	go func() {
		defer close(summaries)
		for stream.Receive() {
			if s := stream.Msg().GetJob(); s != nil {
				select {
				case summaries <- s:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	t.waitRunning(id, 2)
	t.env.open(id + "-fail")
	timeout := time.After(t.waits.failover)
	for restarted := false; !restarted; {
		select {
		case s, ok := <-summaries:
			if !ok {
				t.Fatalf("the watch ended (%v) without reporting the restart; expected a message with restart_count 1", stream.Err())
			}
			if s.GetRestartCount() >= 1 {
				restarted = true
				if s.GetFailure() == nil {
					t.Errorf("the restart's message (%v, restart_count %d) carries no failure; expected the task failure that caused it", s.GetStatus(), s.GetRestartCount())
				}
			}
		case <-timeout:
			t.Fatalf("no WatchJob message with restart_count 1 within %v of a task failure that restarted part of the job; expected one (since 1.2), also while the job stays RUNNING", t.waits.failover)
		}
	}
	t.env.open(id)
	if r := t.result(id); r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED || r.GetRestartCount() != 1 {
		t.Errorf("job ended %v after %d restarts; expected FINISHED after 1", r.GetStatus(), r.GetRestartCount())
	}
}

func unaskedCancelIsAFailure(t *T) {
	id := t.job("j")
	t.runCanceledUnasked(id)
	t.env.open(id + "-fail")
	t.failedNotRedeployed(id, 1, "its only attempt was reported CANCELED unasked", "an attempt CANCELED without its JobMaster asking")
}

// runCanceledUnasked submits a job of one "counter" subtask under
// NoRestart, whose failure (its gate id+"-fail") the runner's
// TaskExecutors report as CANCELED, and waits for it to run.
func (t *T) runCanceledUnasked(id string) {
	t.env.reportFailuresAsCanceled(id)
	g := counterGraph(id, 1, 0)
	g.Config.RestartStrategy = &jobplanev1.RestartStrategy{Strategy: &jobplanev1.RestartStrategy_None{None: &jobplanev1.RestartStrategy_NoRestart{}}}
	t.mustSubmit(id, g)
	t.waitRunning(id, 1)
}

// failedNotRedeployed checks that the job of runCanceledUnasked, its
// attempt canceled unasked (after), ends FAILED with the failure, its
// subtask deployed no more than the deployed times: the attempt (what)
// is a task failure under NoRestart. A server that does not count it
// deploys it again, and the new attempt (its fail gate open when it
// starts) runs on: the wait stops at that deployment, or the job's end.
func (t *T) failedNotRedeployed(id string, deployed int, after, what string) {
	if !t.wait(t.waits.result, func() bool {
		switch t.status(id) {
		case jobplanev1.JobStatus_JOB_STATUS_FAILED, jobplanev1.JobStatus_JOB_STATUS_FINISHED, jobplanev1.JobStatus_JOB_STATUS_CANCELED:
			return true
		}
		return len(t.events(id, "SubmitTask")) > deployed
	}) {
		t.Fatalf("job %s is %v %v after %s; expected it FAILED (a task failure under NoRestart)", id, t.status(id), t.waits.result, after)
	}
	if n := len(t.events(id, "SubmitTask")); n > deployed {
		t.Fatalf("job %s: its subtask was deployed %d times, %d of them after %s; expected none after: %s is a task failure, and NoRestart restarts nothing", id, n, n-deployed, after, what)
	}
	r := t.result(id)
	if r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FAILED || r.GetFailure() == nil {
		t.Errorf("job %s ended %v with failure %v; expected FAILED with the attempt's failure", id, r.GetStatus(), r.GetFailure())
	}
}

package runner

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
	"github.com/jobplane/jobplane/sdk/election"
)

// Features a server declares; a case that needs one the server lacks is
// skipped.
const (
	// FeatureResourceManager: the server runs a ResourceManager that the
	// runner's TaskExecutors register with, and JobMasters that deploy to
	// them.
	FeatureResourceManager = "implements_resource_manager"
	// FeatureFailover: two instances on one store are active-standby.
	FeatureFailover = "supports_failover"
	// featureRunnerStarts: the runner starts (and kills) the server; set
	// when --server-command is given.
	featureRunnerStarts = "runner_starts_server"
)

// Case is one conformance case.
type Case struct {
	// Name is hierarchical: group/case.
	Name string
	// Doc says what the case checks, for the README and -v.
	Doc string
	// Requires lists the features the case needs.
	Requires []string
	// Instances is the number of server instances the case starts; the
	// default is 1.
	Instances int
	// Run runs the case against t's environment.
	Run func(t *T)
}

// T is a running case.
type T struct {
	ctx   context.Context
	env   *env       // the server cases' environment
	store *storeProc // the store cases' store
	te    *teEnv     // the TaskExecutor cases' environment
	ids   string     // prefix of the case's job ids

	mu        sync.Mutex
	failures  []string
	skipped   string   // why the case skipped itself
	submitted []string // job ids, to cancel after the case on a shared store
	cleanups  []func()
	setups    int // > 0 while a step the case needs before its checks runs

	// timings are the server's advertised timings, set by ready (nil
	// before, or when the server advertises none), and waits the waits
	// derived from them, scaled by scale (Config.TimingScale).
	timings *jobplanev1.ServerTimings
	// limits are the server's advertised limits, set by ready (nil
	// before, or when the server advertises none).
	limits *jobplanev1.ServerLimits
	waits  waits
	scale  float64
	// note prints a line about the run once; nil for store cases.
	note func(string)
}

// Failures are of three kinds. A broken promise is a plain message that
// names the promise. Two kinds are marked by a prefix, and never count as
// the case catching a bug (see CaughtByAssertion): a call the server did
// not answer in time, and a step the case needed before its own check.
const (
	noAnswerPrefix = "no answer: "
	setupPrefix    = "setup: "
)

// CaughtByAssertion reports whether a failed case failed by one of its
// own assertions, a promise it names broken, and not only by a timeout or
// a failed step before its checks.
func CaughtByAssertion(r Result) bool {
	for _, m := range r.Messages {
		if !strings.HasPrefix(m, noAnswerPrefix) && !strings.HasPrefix(m, setupPrefix) && !strings.HasPrefix(m, "environment: ") {
			return true
		}
	}
	return false
}

// setup runs f, a step the case needs before it can check its promise:
// f's failures are marked as the setup's, not as a promise broken.
func (t *T) setup(f func()) {
	t.mu.Lock()
	t.setups++
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		t.setups--
		t.mu.Unlock()
	}()
	f()
}

// timedOut reports whether err is a call that got no answer in time.
func timedOut(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || connect.CodeOf(err) == connect.CodeDeadlineExceeded
}

// failNow stops the case's goroutine (the case has failed).
func (t *T) failNow() { runtime.Goexit() }

// Helper does nothing; it lets T serve as a storetest.T.
func (t *T) Helper() {}

// Cleanup registers f to run when the case ends, the last registered
// first.
func (t *T) Cleanup(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cleanups = append(t.cleanups, f)
}

// run runs f as the case's body on a goroutine of its own (Fatalf and Skip
// end it), then the registered cleanups, and waits for it until t.ctx
// ends. It returns the case's failures and, if it skipped itself, why.
func (t *T) run(timeout time.Duration, f func()) (failures []string, skipped string) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer t.runCleanups()
		f()
	}()
	select {
	case <-done:
	case <-t.ctx.Done():
		t.mu.Lock()
		t.failures = append(t.failures, fmt.Sprintf("%sthe case did not end within %v", noAnswerPrefix, timeout))
		t.mu.Unlock()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.failures), t.skipped
}

// runCleanups runs the registered cleanups.
func (t *T) runCleanups() {
	for {
		t.mu.Lock()
		if len(t.cleanups) == 0 {
			t.mu.Unlock()
			return
		}
		f := t.cleanups[len(t.cleanups)-1]
		t.cleanups = t.cleanups[:len(t.cleanups)-1]
		t.mu.Unlock()
		f()
	}
}

// Error records a failure.
func (t *T) Error(args ...any) { t.Errorf("%s", fmt.Sprint(args...)) }

// Fatal records a failure and ends the case.
func (t *T) Fatal(args ...any) { t.Fatalf("%s", fmt.Sprint(args...)) }

// Skip ends the case as skipped.
func (t *T) Skip(args ...any) {
	t.mu.Lock()
	t.skipped = fmt.Sprint(args...)
	t.mu.Unlock()
	t.failNow()
}

// Errorf records a failure: what was observed, and what was expected. A
// failure caused by a call that timed out is marked as "no answer", one
// within a setup step as the setup's.
func (t *T) Errorf(format string, args ...any) {
	prefix := ""
	for _, a := range args {
		if err, ok := a.(error); ok && timedOut(err) {
			prefix = noAnswerPrefix
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if prefix == "" && t.setups > 0 {
		prefix = setupPrefix
	}
	t.failures = append(t.failures, prefix+fmt.Sprintf(format, args...))
}

// Fatalf records a failure and ends the case.
func (t *T) Fatalf(format string, args ...any) {
	t.Errorf(format, args...)
	t.failNow()
}

func (t *T) failed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.failures) > 0
}

// job returns a job id unique to the case.
func (t *T) job(name string) string { return t.ids + name }

// wait waits up to d for ok, polling; it reports whether ok held.
func (t *T) wait(d time.Duration, ok func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if ok() {
			return true
		}
		if time.Now().After(deadline) || t.ctx.Err() != nil {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// dispatcher returns a client of the leading Dispatcher, or ends the case.
func (t *T) dispatcher() jobplanev1connect.DispatcherServiceClient {
	ctx, cancel := context.WithTimeout(t.ctx, t.waits.failover)
	defer cancel()
	d, err := t.env.dispatcher(ctx)
	if err != nil {
		t.Fatalf("server: %v; expected a Dispatcher that publishes its address with ConfirmLeadership in %q", err, election.JobManager)
	}
	return d
}

// submit submits a job (its answer is recorded as an "ack" event).
func (t *T) submit(id string, g *jobplanev1.JobGraph) (*jobplanev1.SubmitJobResponse, error) {
	ctx, cancel := context.WithTimeout(t.ctx, t.waits.failover)
	defer cancel()
	return t.dispatcher().SubmitJob(ctx, &jobplanev1.SubmitJobRequest{JobId: id, JobGraph: g})
}

// mustSubmit submits a job that must be accepted. A Dispatcher that
// answers NOT_LEADER (say, one still taking up its leadership) is asked
// again, as a client would, for up to a failover's wait.
func (t *T) mustSubmit(id string, g *jobplanev1.JobGraph) *jobplanev1.SubmitJobResponse {
	t.mu.Lock()
	t.submitted = append(t.submitted, id)
	t.mu.Unlock()
	resp, err := t.submit(id, g)
	for deadline := time.Now().Add(t.waits.failover); isNotLeader(err) && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		resp, err = t.submit(id, g)
	}
	if err != nil {
		t.Fatalf("SubmitJob(%s): %v; expected it accepted", id, err)
	}
	return resp
}

// cancelSubmitted cancels, best effort, every job the case submitted.
func (t *T) cancelSubmitted() {
	t.mu.Lock()
	ids := slices.Clone(t.submitted)
	t.mu.Unlock()
	d, err := t.env.dispatcher(t.ctx)
	if err != nil {
		return
	}
	for _, id := range ids {
		_, _ = d.CancelJob(t.ctx, &jobplanev1.CancelJobRequest{JobId: id})
	}
}

// result waits for the job's result. A job that does not end within the
// result wait (60s for the reference server's timings)
// breaks the promise that it ends (when it does is up to the case); a
// server that does not answer is "no answer".
func (t *T) result(id string) *jobplanev1.JobResult {
	deadline := time.Now().Add(t.waits.result)
	var lastErr error
	for time.Now().Before(deadline) && t.ctx.Err() == nil {
		ctx, cancel := context.WithTimeout(t.ctx, 5*time.Second)
		resp, err := t.dispatcher().GetJobResult(ctx, &jobplanev1.GetJobResultRequest{JobId: id, Wait: true})
		cancel()
		if err == nil {
			return resp.GetResult()
		}
		lastErr = err
		// A long wait may be closed, or the leader change.
		if !timedOut(err) && connect.CodeOf(err) != connect.CodeUnavailable && !isNotLeader(err) {
			t.Fatalf("GetJobResult(%s): %v; expected the job's result", id, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if st := t.status(id); st != jobplanev1.JobStatus_JOB_STATUS_UNSPECIFIED {
		t.Fatalf("job %s still %v %v on; expected it to end and its result to be served (GetJobResult answered %s)", id, st, t.waits.result, fmt.Sprint(lastErr))
	}
	t.Fatalf("GetJobResult(%s): %v; expected the job's result", id, lastErr)
	return nil
}

// status returns the job's current status (UNSPECIFIED on error).
func (t *T) status(id string) jobplanev1.JobStatus {
	ctx, cancel := context.WithTimeout(t.ctx, 10*time.Second)
	defer cancel()
	resp, err := t.dispatcher().GetJob(ctx, &jobplanev1.GetJobRequest{JobId: id})
	if err != nil {
		return jobplanev1.JobStatus_JOB_STATUS_UNSPECIFIED
	}
	return resp.GetJob().GetSummary().GetStatus()
}

// waitRunning waits until n attempts of the job run on the runner's
// TaskExecutors (each reported RUNNING).
func (t *T) waitRunning(id string, n int) {
	t.setup(func() {
		if !t.wait(t.waits.failover, func() bool { return len(t.running(id)) >= n }) {
			t.Fatalf("job %s: %d attempts reported RUNNING within %v; expected %d", id, len(t.running(id)), t.waits.failover, n)
		}
	})
}

// running returns the attempts of the job reported RUNNING and not
// since terminal.
func (t *T) running(id string) map[string]bool {
	out := map[string]bool{}
	for _, e := range t.env.log.Events(func(e Event) bool { return e.Key == id && e.Op == "UpdateTaskExecutionState" }) {
		if e.State == jobplanev1.ExecutionState_EXECUTION_STATE_RUNNING {
			out[e.Attempt] = true
		} else if e.State >= jobplanev1.ExecutionState_EXECUTION_STATE_FINISHED && e.State != jobplanev1.ExecutionState_EXECUTION_STATE_CANCELING {
			delete(out, e.Attempt)
		}
	}
	return out
}

// events returns the case's events about job (or election key) that
// have op (any op if empty).
func (t *T) events(key, op string) []Event {
	return t.env.log.Events(func(e Event) bool { return e.Key == key && (op == "" || e.Op == op) })
}

// ok filters events to those without error.
func ok(evs []Event) []Event {
	var out []Event
	for _, e := range evs {
		if e.Err == nil {
			out = append(out, e)
		}
	}
	return out
}

// errorDetail returns the first detail of type T that err carries.
func errorDetail[T any](err error) (T, bool) {
	var zero T
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return zero, false
	}
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			if x, ok := v.(T); ok {
				return x, true
			}
		}
	}
	return zero, false
}

func isNotLeader(err error) bool { return reason(err) == "NOT_LEADER" }

// reason returns the ErrorInfo reason of err, if any.
func reason(err error) string {
	info, _ := errorDetail[*errdetails.ErrorInfo](err)
	return info.GetReason()
}

// barrier runs a small job to its end: every event the server caused
// before it is then in the log, so a case can check for calls that must
// not have happened without sleeping.
func (t *T) barrier() {
	t.setup(func() { t.terminated(t.job(fmt.Sprintf("barrier-%d", t.env.log.Len()))) })
}

// terminated submits a job that runs until canceled, cancels it, and
// waits for its CANCELED result: a round trip through submission,
// persistence, cancellation and the job result, with or without a
// ResourceManager.
func (t *T) terminated(id string) {
	t.mustSubmit(id, gatedGraph(1, "never"))
	t.cancel(id)
	if r := t.result(id); r.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_CANCELED {
		t.Fatalf("job %s ended %v after a cancel; expected CANCELED", id, r.GetStatus())
	}
}

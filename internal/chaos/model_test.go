package chaos

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
)

const (
	initializing = jobplanev1.JobStatus_JOB_STATUS_INITIALIZING
	running      = jobplanev1.JobStatus_JOB_STATUS_RUNNING
	cancelling   = jobplanev1.JobStatus_JOB_STATUS_CANCELLING
	finished     = jobplanev1.JobStatus_JOB_STATUS_FINISHED
	failed       = jobplanev1.JobStatus_JOB_STATUS_FAILED
	canceled     = jobplanev1.JobStatus_JOB_STATUS_CANCELED
)

// end is the return time of an operation of unknown outcome.
const end = math.MaxInt64

// op builds an operation of job "j" (plan "p" for submissions) called at
// call and answered at ret.
func op(kind Op, call, ret int64, out Output) porcupine.Operation {
	in := Input{Op: kind, JobID: "j"}
	if kind == OpSubmit {
		in.Plan = "p"
	}
	return porcupine.Operation{Input: in, Call: call, Output: out, Return: ret}
}

// withPlan returns o submitting plan instead.
func withPlan(o porcupine.Operation, plan string) porcupine.Operation {
	in := o.Input.(Input)
	in.Plan = plan
	o.Input = in
	return o
}

// withJob returns o about job id instead.
func withJob(o porcupine.Operation, id string) porcupine.Operation {
	in := o.Input.(Input)
	in.JobID = id
	o.Input = in
	return o
}

var (
	created   = Output{Outcome: OK, Created: true, Status: initializing}
	unknown   = Output{Outcome: Unknown}
	notFound  = Output{Outcome: NotFound}
	rejected  = Output{Outcome: Rejected}
	terminal  = Output{Outcome: JobTerminal}
	pending   = Output{Outcome: NotTerminal}
	duplicate = Output{Outcome: AlreadyExists}
)

func existing(s jobplanev1.JobStatus) Output { return Output{Outcome: OK, Status: s} }
func status(s jobplanev1.JobStatus) Output   { return Output{Outcome: OK, Status: s} }

// keptHistories keep every promise.
var keptHistories = []struct {
	name string
	ops  []porcupine.Operation
}{
	{"submitted, ran, finished, resubmitted", []porcupine.Operation{
		op(OpObserve, 0, 1, notFound),
		op(OpSubmit, 2, 3, created),
		op(OpObserve, 4, 5, status(running)),
		op(OpObserve, 6, 7, status(finished)),
		op(OpObserve, 8, 9, status(finished)),
		op(OpSubmit, 10, 11, existing(finished)),
	}},
	{"answer lost, retry told created=false", []porcupine.Operation{
		op(OpSubmit, 0, end, unknown),
		op(OpSubmit, 5, 6, existing(running)),
		op(OpObserve, 7, 8, status(failed)),
	}},
	{"failed submission that did nothing, then a retry that created", []porcupine.Operation{
		op(OpSubmit, 0, end, unknown),
		op(OpObserve, 2, 3, notFound),
		op(OpSubmit, 5, 6, created),
	}},
	{"submission whose outcome stays unknown and that never took effect", []porcupine.Operation{
		op(OpSubmit, 0, end, unknown),
		op(OpObserve, 2, 3, notFound),
		op(OpObserve, 4, 5, notFound),
	}},
	{"concurrent submissions: one created", []porcupine.Operation{
		op(OpSubmit, 0, 10, created),
		op(OpSubmit, 1, 5, existing(initializing)),
		op(OpSubmit, 2, 11, existing(running)),
	}},
	{"observed while its submission was in flight", []porcupine.Operation{
		op(OpSubmit, 0, 10, created),
		op(OpObserve, 1, 2, notFound),
		op(OpObserve, 3, 4, status(running)),
	}},
	{"cancel acknowledged, ends canceled, cancel again", []porcupine.Operation{
		op(OpSubmit, 0, 1, created),
		op(OpCancel, 2, 3, status(cancelling)),
		op(OpObserve, 4, 5, status(cancelling)),
		op(OpObserve, 6, 7, pending),
		op(OpObserve, 8, 9, status(canceled)),
		op(OpCancel, 10, 11, status(canceled)),
	}},
	{"cancel of a finished job", []porcupine.Operation{
		op(OpSubmit, 0, 1, created),
		op(OpCancel, 2, 3, terminal),
		op(OpObserve, 4, 5, status(finished)),
		op(OpCancel, 6, 7, terminal),
	}},
	{"cancel racing the end: answered terminal, observed failed", []porcupine.Operation{
		op(OpSubmit, 0, 1, created),
		op(OpObserve, 2, 10, status(failed)),
		op(OpCancel, 3, 4, terminal),
	}},
	{"cancel of unknown outcome, job finished", []porcupine.Operation{
		op(OpSubmit, 0, 1, created),
		op(OpCancel, 2, end, unknown),
		op(OpObserve, 4, 5, status(finished)),
	}},
	{"cancel of unknown outcome that took effect", []porcupine.Operation{
		op(OpSubmit, 0, 1, created),
		op(OpCancel, 2, end, unknown),
		op(OpObserve, 4, 5, status(canceled)),
	}},
	{"cancel and observation of an unknown job", []porcupine.Operation{
		op(OpCancel, 0, 1, notFound),
		op(OpObserve, 2, 3, notFound),
	}},
	{"another plan under the same id", []porcupine.Operation{
		op(OpSubmit, 0, 1, created),
		withPlan(op(OpSubmit, 2, 3, duplicate), "q"),
		op(OpObserve, 4, 5, status(finished)),
		withPlan(op(OpSubmit, 6, 7, duplicate), "q"),
	}},
	{"rejected calls change nothing", []porcupine.Operation{
		op(OpCancel, 0, 1, rejected),
		op(OpSubmit, 2, 3, rejected),
		op(OpSubmit, 4, 5, created),
		op(OpCancel, 6, 7, rejected),
		op(OpObserve, 8, 9, status(finished)),
	}},
	{"two jobs, each its own partition", []porcupine.Operation{
		op(OpSubmit, 0, 1, created),
		withJob(op(OpSubmit, 0, 1, created), "k"),
		op(OpObserve, 2, 3, status(finished)),
		withJob(op(OpObserve, 2, 3, status(failed)), "k"),
	}},
}

// brokenHistories each break one promise.
var brokenHistories = []struct {
	name string
	ops  []porcupine.Operation
}{
	{"acknowledged job lost", []porcupine.Operation{
		op(OpSubmit, 0, 1, created),
		op(OpObserve, 2, 3, status(running)),
		op(OpObserve, 4, 5, notFound),
	}},
	{"acknowledged job not found at once", []porcupine.Operation{
		op(OpSubmit, 0, 1, created),
		op(OpObserve, 2, 3, notFound),
	}},
	{"job told created=false lost", []porcupine.Operation{
		op(OpSubmit, 0, end, unknown),
		op(OpSubmit, 2, 3, existing(running)),
		op(OpObserve, 4, 5, notFound),
	}},
	{"acknowledged job not found by cancel", []porcupine.Operation{
		op(OpSubmit, 0, 1, created),
		op(OpCancel, 2, 3, notFound),
	}},
	{"two terminal states", []porcupine.Operation{
		op(OpSubmit, 0, 1, created),
		op(OpObserve, 2, 3, status(finished)),
		op(OpObserve, 4, 5, status(failed)),
	}},
	{"running again after a terminal state", []porcupine.Operation{
		op(OpSubmit, 0, 1, created),
		op(OpObserve, 2, 3, status(canceled)),
		op(OpObserve, 4, 5, status(running)),
	}},
	{"resubmission answers another terminal state", []porcupine.Operation{
		op(OpSubmit, 0, 1, created),
		op(OpObserve, 2, 3, status(failed)),
		op(OpSubmit, 4, 5, existing(finished)),
	}},
	{"cancel acknowledged, job finished", []porcupine.Operation{
		op(OpSubmit, 0, 1, created),
		op(OpCancel, 2, 3, status(cancelling)),
		op(OpObserve, 4, 5, status(finished)),
	}},
	{"cancel acknowledged concurrently with an observed finish", []porcupine.Operation{
		op(OpSubmit, 0, 1, created),
		op(OpCancel, 2, 20, status(cancelling)),
		op(OpObserve, 5, 6, status(finished)),
	}},
	{"cancel acknowledged after the job finished", []porcupine.Operation{
		op(OpSubmit, 0, 1, created),
		op(OpObserve, 2, 3, status(finished)),
		op(OpCancel, 4, 5, status(canceled)),
	}},
	{"cancel answered terminal, job canceled", []porcupine.Operation{
		op(OpSubmit, 0, 1, created),
		op(OpCancel, 2, 3, terminal),
		op(OpObserve, 4, 5, status(canceled)),
	}},
	{"cancel answered terminal after a cancel acknowledged", []porcupine.Operation{
		op(OpSubmit, 0, 1, created),
		op(OpCancel, 2, 3, status(cancelling)),
		op(OpCancel, 4, 5, terminal),
	}},
	{"cancel acknowledged for a job never submitted", []porcupine.Operation{
		op(OpCancel, 0, 1, status(cancelling)),
	}},
	{"two created=true, one after the other", []porcupine.Operation{
		op(OpSubmit, 0, 1, created),
		op(OpSubmit, 2, 3, created),
	}},
	{"two created=true, concurrent", []porcupine.Operation{
		op(OpSubmit, 0, 10, created),
		op(OpSubmit, 1, 11, created),
	}},
	{"created=false for a job nobody submitted", []porcupine.Operation{
		op(OpSubmit, 0, 1, existing(running)),
	}},
	{"observed before its submission was called", []porcupine.Operation{
		op(OpObserve, 0, 1, status(running)),
		op(OpSubmit, 2, 3, created),
	}},
	{"already exists for the same plan", []porcupine.Operation{
		op(OpSubmit, 0, 1, created),
		op(OpSubmit, 2, 3, duplicate),
	}},
	{"created=false for another plan", []porcupine.Operation{
		op(OpSubmit, 0, 1, created),
		withPlan(op(OpSubmit, 2, 3, existing(running)), "q"),
	}},
	{"no result after a terminal state", []porcupine.Operation{
		op(OpSubmit, 0, 1, created),
		op(OpObserve, 2, 3, status(finished)),
		op(OpObserve, 4, 5, pending),
	}},
	{"one job of two broken", []porcupine.Operation{
		op(OpSubmit, 0, 1, created),
		withJob(op(OpSubmit, 0, 1, created), "k"),
		op(OpObserve, 2, 3, status(finished)),
		withJob(op(OpObserve, 2, 3, status(failed)), "k"),
		withJob(op(OpObserve, 4, 5, status(finished)), "k"),
	}},
}

func TestModelAcceptsHistoriesThatKeepThePromises(t *testing.T) {
	t.Parallel()
	for _, tc := range keptHistories {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if err := CheckHistory(tc.ops, 10*time.Second, ""); err != nil {
				t.Errorf("CheckHistory = %v, want nil", err)
			}
		})
	}
}

func TestModelRejectsHistoriesThatBreakAPromise(t *testing.T) {
	t.Parallel()
	for _, tc := range brokenHistories {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := CheckHistory(tc.ops, 10*time.Second, "")
			if err == nil {
				t.Fatalf("CheckHistory = nil, want a violation")
			}
			if errors.Is(err, ErrUndecided) {
				t.Fatalf("CheckHistory = %v, want a violation", err)
			}
		})
	}
}

func TestCheckHistoryNamesTheBrokenJobAndWritesTheVisualization(t *testing.T) {
	t.Parallel()
	ops := []porcupine.Operation{
		op(OpSubmit, 0, 1, created),
		op(OpObserve, 2, 3, status(finished)),
		withJob(op(OpSubmit, 0, 1, created), "lost"),
		withJob(op(OpObserve, 2, 3, notFound), "lost"),
	}
	path := filepath.Join(t.TempDir(), "history.html")
	r := NewRecorder()
	r.Fault("SIGKILL jobmanager-0")()
	err := CheckHistory(ops, 10*time.Second, path, r.Faults()...)
	if err == nil {
		t.Fatal("CheckHistory = nil, want a violation")
	}
	msg := err.Error()
	if !strings.Contains(msg, "job lost:") || strings.Contains(msg, "job j:") {
		t.Errorf("CheckHistory = %q, want job lost named and job j not", msg)
	}
	if !strings.Contains(msg, "observe(lost) -> not-found") {
		t.Errorf("CheckHistory = %q, want the operations of job lost", msg)
	}
	html, rerr := os.ReadFile(path)
	if rerr != nil {
		t.Fatalf("the visualization was not written: %v", rerr)
	}
	// JSON in the page escapes ">".
	if !strings.Contains(string(html), "observe(lost) -\\u003e not-found") {
		t.Errorf("the visualization (%d bytes) does not show the operations", len(html))
	}
	if !strings.Contains(string(html), "SIGKILL jobmanager-0") {
		t.Errorf("the visualization (%d bytes) does not show the fault", len(html))
	}
}

func TestFormatOperation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		op   porcupine.Operation
		want string
	}{
		{op(OpSubmit, int64(time.Millisecond), int64(3*time.Millisecond), created), "[lane 0] 1ms..3ms submit(j) -> ok created=true INITIALIZING"},
		{op(OpCancel, int64(time.Second), end, unknown), "[lane 0] 1s..end cancel(j) -> unknown"},
		{op(OpObserve, 0, 1, notFound), "[lane 0] 0s..1ns observe(j) -> not-found"},
	} {
		if got := FormatOperation(tc.op); got != tc.want {
			t.Errorf("FormatOperation = %q, want %q", got, tc.want)
		}
	}
}

// A client retrying through a failover records dozens of operations of
// unknown outcome for one job; the check still decides at once, and
// still finds a broken promise among them.
func TestCheckHistoryWithManyOperationsOfUnknownOutcome(t *testing.T) {
	t.Parallel()
	var kept, broken []porcupine.Operation
	for i := range int64(40) {
		kept = append(kept, op(OpSubmit, 2*i, end, unknown), op(OpCancel, 2*i+1, end, unknown))
	}
	kept = append(kept,
		op(OpSubmit, 100, 101, existing(running)),
		op(OpObserve, 102, 103, status(finished)),
		withPlan(op(OpSubmit, 104, end, unknown), "q"),
		withPlan(op(OpSubmit, 105, end, unknown), "q"),
		op(OpSubmit, 106, 107, existing(finished)),
	)
	broken = append(append(broken, kept...), op(OpObserve, 108, 109, status(canceled)))
	if err := CheckHistory(kept, 10*time.Second, ""); err != nil {
		t.Errorf("CheckHistory = %v, want nil", err)
	}
	if err := CheckHistory(broken, 10*time.Second, ""); err == nil || errors.Is(err, ErrUndecided) {
		t.Errorf("CheckHistory of a job observed FINISHED then CANCELED = %v, want a violation", err)
	}
	if got := len(compact(kept)); got != 5 {
		t.Errorf("compact kept %d operations of %d, want 5: the earliest unknown submission of each plan and the 3 answered", got, len(kept))
	}
}

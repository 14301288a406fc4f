package chaos

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk"
	"github.com/jobplane/jobplane/server/localcluster"
)

func TestMain(m *testing.M) { os.Exit(localcluster.Main(m)) }

// sleepJob is a job of one vertex of parallelism 2 that sleeps for d.
func sleepJob(name, d string) *jobplanev1.JobGraph {
	return &jobplanev1.JobGraph{Name: name, Vertices: []*jobplanev1.JobVertex{
		{Id: "v", Name: "v", Invokable: "sleep", Parallelism: 2, Config: map[string]string{"duration": d}},
	}}
}

// TestInterceptorRecordsARealCluster drives a real standalone cluster
// through an SDK client that records its calls, and checks the history
// and the TaskExecutors' attempt log.
func TestInterceptorRecordsARealCluster(t *testing.T) {
	t.Parallel()
	attemptLog := filepath.Join(t.TempDir(), "attempts.jsonl")
	c := localcluster.NewStandalone(t, "--task-executors", "2", "--attempt-log", attemptLog)
	c.WaitTaskExecutor(t, "sleep")
	rec := NewRecorder()
	client, err := sdk.New([]string{c.URL()}, sdk.WithInterceptors(rec.Interceptor()))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	// Two short jobs, one of them submitted twice, and another plan
	// under its id.
	for _, id := range []string{"short1", "short2", "short1"} {
		_, err := client.Submit(ctx, sleepJob(id, "20ms"), sdk.WithJobID(id))
		must("submit "+id, err)
	}
	if _, err := client.Submit(ctx, sleepJob("other", "20ms"), sdk.WithJobID("short1")); err == nil {
		t.Fatal("submitting another plan under short1 succeeded")
	}
	// A long job, canceled once its two subtasks run (the job is RUNNING
	// from its JobMaster's start, before they are deployed; canceled then,
	// they would never run).
	_, err = client.Submit(ctx, sleepJob("long", "1h"), sdk.WithJobID("long"))
	must("submit long", err)
	running := func(s *jobplanev1.JobSummary) int32 {
		for _, c := range s.GetTaskCounts() {
			if c.GetState() == jobplanev1.ExecutionState_EXECUTION_STATE_RUNNING {
				return c.GetCount()
			}
		}
		return 0
	}
	for {
		d, err := client.Get(ctx, "long")
		must("get long", err)
		if d.GetSummary().GetStatus() == jobplanev1.JobStatus_JOB_STATUS_RUNNING && running(d.GetSummary()) == 2 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("long's subtasks never RUNNING")
		case <-time.After(10 * time.Millisecond):
		}
	}
	_, err = client.Cancel(ctx, "long")
	must("cancel long", err)
	for _, id := range []string{"short1", "short2", "long"} {
		_, err := client.Wait(ctx, id)
		must("wait "+id, err)
	}
	// A cancel of a finished job, and calls about a job never submitted.
	if _, err := client.Cancel(ctx, "short2"); !errors.Is(err, sdk.ErrJobTerminal) {
		t.Fatalf("cancel of finished short2: %v, want ErrJobTerminal", err)
	}
	if _, err := client.Get(ctx, "never"); !errors.Is(err, sdk.ErrJobNotFound) {
		t.Fatalf("get never: %v, want ErrJobNotFound", err)
	}
	if _, err := client.Cancel(ctx, "never"); !errors.Is(err, sdk.ErrJobNotFound) {
		t.Fatalf("cancel never: %v, want ErrJobNotFound", err)
	}

	ops := rec.Operations()
	seen := make(map[Op]map[Outcome]int)
	for _, op := range ops {
		in, out := op.Input.(Input), op.Output.(Output)
		if seen[in.Op] == nil {
			seen[in.Op] = make(map[Outcome]int)
		}
		seen[in.Op][out.Outcome]++
		if in.Op == OpSubmit && (len(in.Plan) != 64) {
			t.Errorf("submission recorded with plan %q, want the hex of a digest", in.Plan)
		}
	}
	for _, want := range []struct {
		op      Op
		outcome Outcome
		n       int
	}{
		{OpSubmit, OK, 4}, {OpSubmit, AlreadyExists, 1},
		{OpCancel, OK, 1}, {OpCancel, JobTerminal, 1}, {OpCancel, NotFound, 1},
		{OpObserve, NotFound, 1},
	} {
		if got := seen[want.op][want.outcome]; got != want.n {
			t.Errorf("%d %s operations of outcome %s recorded, want %d (all: %v)", got, want.op, want.outcome, want.n, seen)
		}
	}
	if seen[OpObserve][OK] < 4 {
		t.Errorf("%d observations recorded, want at least 4 (all: %v)", seen[OpObserve][OK], seen)
	}
	if err := CheckHistory(ops, 10*time.Second, filepath.Join(t.TempDir(), "history.html")); err != nil {
		t.Errorf("CheckHistory of the recorded history: %v", err)
	}
	// The same history with the finished short1 then reported lost breaks
	// a promise.
	lost := append(ops, porcupine.Operation{
		Input: Input{Op: OpObserve, JobID: "short1"}, Output: Output{Outcome: NotFound},
		Call: ops[len(ops)-1].Return + 1, Return: ops[len(ops)-1].Return + 2,
	})
	if err := CheckHistory(lost, 10*time.Second, ""); err == nil {
		t.Error("CheckHistory of the history with short1 lost at the end = nil, want a violation")
	}

	// The TaskExecutor writes an attempt's stop once the attempt has
	// stopped, which may come after the job's end was answered: read the
	// log until it holds every attempt stopped, for up to 10s.
	var (
		attempts []Interval
		stopped  int
	)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		f, err := os.Open(attemptLog)
		must("open the attempt log", err)
		attempts, err = ReadAttemptLog(f, "standalone", nil)
		f.Close()
		must("read the attempt log", err)
		stopped = 0
		for _, a := range attempts {
			if a.State != "" {
				stopped++
			}
		}
		if len(attempts) >= 6 && stopped == len(attempts) || time.Now().After(deadline) {
			break
		}
	}
	// short1, short2 and long ran two subtasks each, to their end.
	if len(attempts) < 6 || stopped != len(attempts) {
		t.Errorf("attempt log: %d attempts, %d stopped; want at least 6, all stopped: %v", len(attempts), stopped, attempts)
	}
	if err := CheckAttempts(attempts); err != nil {
		t.Errorf("CheckAttempts: %v", err)
	}
}

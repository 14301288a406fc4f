package sdk_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
	"github.com/jobplane/jobplane/sdk"
	"github.com/jobplane/jobplane/sdk/jobgraph"
)

// countGraph is a job of one vertex of the built-in count invokable, on
// 2 subtasks, counting to `to` a step each 10ms, checkpointed every
// interval (none when 0), restored from savepoint unless it is "".
func countGraph(t *testing.T, name, to string, interval time.Duration, savepoint string) *jobplanev1.JobGraph {
	t.Helper()
	b := jobgraph.NewBuilder(name)
	b.Vertex("count", "count").Parallelism(2).Config("to", to).Config("every", "10ms")
	if interval > 0 {
		b.Checkpoints(interval)
	}
	b.FixedDelayRestart(3, 100*time.Millisecond).RestoreFromSavepoint(savepoint)
	g, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// waitCheckpoint waits until the job has a completed checkpoint and
// returns its checkpoints.
func waitCheckpoint(ctx context.Context, t *testing.T, c *sdk.Client, jobID string) *jobplanev1.ListCheckpointsResponse {
	t.Helper()
	for {
		cps, err := c.Checkpoints(ctx, jobID)
		if err != nil {
			t.Fatalf("Checkpoints: %v", err)
		}
		if cps.GetStats().GetLatest() != nil && len(cps.GetCheckpoints()) > 0 {
			return cps
		}
		if ctx.Err() != nil {
			t.Fatalf("no completed checkpoint of %s: %v", jobID, cps)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A checkpointed job's life through the Client: its checkpoints, a
// savepoint, a stop with savepoint, a job restored from it, the
// savepoints listed and deleted, and the typed errors.
func TestCheckpointsAndSavepoints(t *testing.T) {
	c := newClient(t, []string{serverURL})
	ctx := testContext(t, 90*time.Second)

	s, err := c.Submit(ctx, countGraph(t, "counting", "1000000", 50*time.Millisecond, ""))
	if err != nil {
		t.Fatal(err)
	}
	cps := waitCheckpoint(ctx, t, c, s.JobID)
	var last uint64
	for _, cp := range cps.GetCheckpoints() {
		if cp.GetCheckpointId() <= last {
			t.Errorf("checkpoint ids not increasing: %v", cps.GetCheckpoints())
		}
		last = cp.GetCheckpointId()
		if cp.GetSubtaskStates() != 2 || cp.GetStateBytes() <= 0 || cp.GetAckTime().AsTime().Before(cp.GetTriggerTime().AsTime()) {
			t.Errorf("checkpoint %v: want 2 subtask states, some bytes, acknowledged after its trigger", cp)
		}
	}
	if st := cps.GetStats(); st.GetCounts().GetCompleted() < 1 || st.GetCounts().GetTriggered() < st.GetCounts().GetCompleted() {
		t.Errorf("stats %v: want a completed checkpoint", st)
	}
	d, err := c.Get(ctx, s.JobID, sdk.WithSummaryView())
	if err != nil || d.GetCheckpoints().GetCounts().GetCompleted() < 1 {
		t.Errorf("Get: checkpoints %v, %v; want the stats", d.GetCheckpoints(), err)
	}

	sp, err := c.TriggerSavepoint(ctx, s.JobID)
	if err != nil {
		t.Fatalf("TriggerSavepoint: %v", err)
	}
	if sp.GetSavepointId() == "" || sp.GetJobId() != s.JobID || sp.GetCheckpoint().GetSubtaskStates() != 2 {
		t.Errorf("savepoint %v: want an id, the job's, 2 subtask states", sp)
	}
	stopped, err := c.TriggerSavepoint(ctx, s.JobID, sdk.WithStop())
	if err != nil {
		t.Fatalf("TriggerSavepoint WithStop: %v", err)
	}
	if stopped.GetCheckpoint().GetCheckpointId() <= sp.GetCheckpoint().GetCheckpointId() {
		t.Errorf("the second savepoint's checkpoint id %d is not after the first's %d", stopped.GetCheckpoint().GetCheckpointId(), sp.GetCheckpoint().GetCheckpointId())
	}
	if res, err := c.Wait(ctx, s.JobID); err != nil || res.GetStatus() != canceled {
		t.Fatalf("Wait after a stop with savepoint = %v, %v; want CANCELED", res.GetStatus(), err)
	}
	if _, err := c.TriggerSavepoint(ctx, s.JobID); !errors.Is(err, sdk.ErrJobTerminal) {
		t.Errorf("TriggerSavepoint of a canceled job = %v, want ErrJobTerminal", err)
	}

	var listed []string
	for info, err := range c.Savepoints(ctx, s.JobID) {
		if err != nil {
			t.Fatalf("Savepoints: %v", err)
		}
		listed = append(listed, info.GetSavepointId())
	}
	if want := []string{sp.GetSavepointId(), stopped.GetSavepointId()}; !slices.Equal(listed, slices.Sorted(slices.Values(want))) {
		t.Errorf("Savepoints of the job = %v, want %v in id order", listed, want)
	}

	// A job that restores from the stopped job's savepoint: its subtasks
	// start from their counts, and its details say where they came from.
	r, err := c.Execute(ctx, countGraph(t, "restored", "1", 0, stopped.GetSavepointId()))
	if err != nil || r.GetStatus() != finished {
		t.Fatalf("the restored job = %v, %v; want FINISHED", r, err)
	}
	if d, err := c.Get(ctx, r.GetJobId(), sdk.WithSummaryView()); err != nil || d.GetCheckpoints().GetRestoredFrom() != stopped.GetSavepointId() {
		t.Errorf("the restored job's checkpoints = %v, %v; want restored from %s", d.GetCheckpoints(), err, stopped.GetSavepointId())
	}

	for _, id := range []string{sp.GetSavepointId(), stopped.GetSavepointId(), sp.GetSavepointId()} {
		if err := c.DeleteSavepoint(ctx, id); err != nil {
			t.Errorf("DeleteSavepoint(%s): %v (deleting an absent one is no error)", id, err)
		}
	}
	for info, err := range c.Savepoints(ctx, "") {
		if err != nil {
			t.Fatalf("Savepoints: %v", err)
		}
		if info.GetJobId() == s.JobID {
			t.Errorf("savepoint %s listed after its deletion", info.GetSavepointId())
		}
	}
	_, err = c.Submit(ctx, countGraph(t, "restored", "1", 0, stopped.GetSavepointId()))
	if !errors.Is(err, sdk.ErrSavepointNotFound) {
		t.Errorf("Submit restoring from a deleted savepoint = %v, want ErrSavepointNotFound", err)
	}
	if _, err := c.Checkpoints(ctx, "no-such-job"); !errors.Is(err, sdk.ErrJobNotFound) {
		t.Errorf("Checkpoints of no job = %v, want ErrJobNotFound", err)
	}
	if _, err := c.TriggerSavepoint(ctx, "no-such-job"); !errors.Is(err, sdk.ErrJobNotFound) {
		t.Errorf("TriggerSavepoint of no job = %v, want ErrJobNotFound", err)
	}
}

// savepointServer answers TriggerSavepoint as a test scripts; n counts
// the calls, from 1. The other calls are UNIMPLEMENTED.
type savepointServer struct {
	jobplanev1connect.UnimplementedDispatcherServiceHandler
	trigger func(ctx context.Context, n int) (*jobplanev1.TriggerSavepointResponse, error)
	n       atomic.Int32
}

func (f *savepointServer) TriggerSavepoint(ctx context.Context, _ *jobplanev1.TriggerSavepointRequest) (*jobplanev1.TriggerSavepointResponse, error) {
	return f.trigger(ctx, int(f.n.Add(1)))
}

// TriggerSavepoint is not idempotent: it follows a NOT_LEADER answer, but
// an attempt that got no answer is not repeated; its error is returned.
func TestTriggerSavepointIsNotRepeated(t *testing.T) {
	ok := &jobplanev1.TriggerSavepointResponse{Savepoint: &jobplanev1.SavepointInfo{SavepointId: "sp", JobId: "j"}}
	for _, tc := range []struct {
		name    string
		answer  func(ctx context.Context, n int) (*jobplanev1.TriggerSavepointResponse, error)
		calls   int
		wantErr bool
	}{
		{"not the leader, then the savepoint", func(_ context.Context, n int) (*jobplanev1.TriggerSavepointResponse, error) {
			if n == 1 {
				return nil, notLeaderAt("")
			}
			return ok, nil
		}, 2, false},
		{"no answer in time", func(ctx context.Context, n int) (*jobplanev1.TriggerSavepointResponse, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		}, 1, true},
		{"the leader unavailable for a reason of its own", func(context.Context, int) (*jobplanev1.TriggerSavepointResponse, error) {
			return nil, answerWith(connect.CodeUnavailable, "STORE_UNAVAILABLE")
		}, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := &savepointServer{trigger: tc.answer}
			c := newClient(t, []string{serveSavepoints(t, f)}, sdk.WithCallTimeout(200*time.Millisecond),
				sdk.WithRetry(sdk.RetryPolicy{InitialBackoff: time.Millisecond, MaxElapsed: 5 * time.Second}))
			sp, err := c.TriggerSavepoint(testContext(t, 30*time.Second), "j", sdk.WithStop())
			if got := int(f.n.Load()); got != tc.calls {
				t.Errorf("%d calls, want %d", got, tc.calls)
			}
			if (err != nil) != tc.wantErr || (err == nil && sp.GetSavepointId() != "sp") {
				t.Errorf("TriggerSavepoint = %v, %v; want an error: %v", sp, err, tc.wantErr)
			}
		})
	}
}

// A server that keeps no checkpoints answers UNIMPLEMENTED, which the
// Client reports as ErrCheckpointsUnsupported, at once.
func TestCheckpointsUnsupported(t *testing.T) {
	c := newClient(t, []string{serveSavepoints(t, &savepointServer{})})
	ctx := testContext(t, 30*time.Second)
	_, err := c.Checkpoints(ctx, "j")
	if !errors.Is(err, sdk.ErrCheckpointsUnsupported) {
		t.Errorf("Checkpoints = %v, want ErrCheckpointsUnsupported", err)
	}
	for _, err := range c.Savepoints(ctx, "") {
		if !errors.Is(err, sdk.ErrCheckpointsUnsupported) {
			t.Errorf("Savepoints = %v, want ErrCheckpointsUnsupported", err)
		}
	}
	if err := c.DeleteSavepoint(ctx, "sp"); !errors.Is(err, sdk.ErrCheckpointsUnsupported) || errors.Is(err, sdk.ErrSavepointNotFound) {
		t.Errorf("DeleteSavepoint = %v, want ErrCheckpointsUnsupported only", err)
	}
}

// serveSavepoints serves f over HTTP/1.1 and h2c on loopback.
func serveSavepoints(t *testing.T, f *savepointServer) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(jobplanev1connect.NewDispatcherServiceHandler(f))
	s := httptest.NewUnstartedServer(mux)
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	s.Config.Protocols = &p
	s.Start()
	t.Cleanup(s.Close)
	return s.URL
}

// answerWith is a jobplane server's error: a code with its ErrorInfo
// reason.
func answerWith(code connect.Code, reason string) error {
	e := connect.NewError(code, errors.New(strings.ToLower(reason)))
	d, _ := connect.NewErrorDetail(&errdetails.ErrorInfo{Domain: "jobplane", Reason: reason})
	e.AddDetail(d)
	return e
}

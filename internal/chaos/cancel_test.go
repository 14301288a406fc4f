package chaos

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk"
	"github.com/jobplane/jobplane/server/localcluster"
)

// TestCancelNearTheEndOfAJob cancels jobs of a 100ms subtask at times
// that sweep across their end, on a standalone cluster without faults:
// every cancel acknowledged must end its job CANCELED, and one answered
// JOB_TERMINAL must find it FINISHED. The recorded history is checked
// too.
func TestCancelNearTheEndOfAJob(t *testing.T) {
	t.Parallel()
	c := localcluster.NewStandalone(t, "--task-executors", "1")
	c.WaitTaskExecutor(t, "sleep")
	rec := NewRecorder()
	client, err := sdk.New([]string{c.URL()}, sdk.WithInterceptors(rec.Interceptor()))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	acked, terminal := 0, 0
	for i := range 40 {
		id := fmt.Sprintf("near-%d", i)
		if _, err := client.Submit(ctx, sleepJob(id, "100ms"), sdk.WithJobID(id)); err != nil {
			t.Fatal(err)
		}
		// The cancel's time is the experiment's input: 50ms to 245ms
		// after the submission's answer, across the subtask's end.
		time.Sleep(time.Duration(50+5*i) * time.Millisecond)
		st, cerr := client.Cancel(ctx, id)
		res, err := client.Wait(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case cerr == nil:
			acked++
			if res.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_CANCELED {
				t.Errorf("%s: cancel answered %v, then the job ended %v; want CANCELED", id, st, res.GetStatus())
			}
		case errors.Is(cerr, sdk.ErrJobTerminal):
			terminal++
			if res.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
				t.Errorf("%s: cancel answered JOB_TERMINAL, then the job ended %v; want FINISHED", id, res.GetStatus())
			}
		default:
			t.Fatalf("%s: cancel: %v", id, cerr)
		}
	}
	t.Logf("%d cancels acknowledged, %d answered JOB_TERMINAL", acked, terminal)
	if err := CheckHistory(rec.Operations(), time.Minute, ""); err != nil {
		t.Error(err)
	}
}

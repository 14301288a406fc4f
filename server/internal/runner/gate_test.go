package runner_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/wire/jobstatus"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/internal/jobmaster"
	"github.com/jobplane/jobplane/server/internal/runner"
)

// A gate of one seat: the first runner launches, the next wait in order;
// a hurried runner launches at once, past them and without a seat; the
// seat goes to the oldest waiting runner once the first one's term ends;
// and closing the gate ends a runner still waiting, SUSPENDED.
func TestGateAdmitsInOrder(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	store, sess := openStore(ctx, t, log)
	router := jobmaster.NewRouter(jobmaster.RouterConfig{})

	created := make(chan string, 8) // JobMasters asked for, by job
	// proceed lets a job's JobMaster creation fail, and its term end.
	proceed := map[string]chan struct{}{"a": make(chan struct{}), "b": make(chan struct{})}
	ended := map[string]chan jobplanev1.JobStatus{} // each runner's end
	gate := runner.NewGate(1)
	runners := map[string]*runner.Runner{}
	for _, id := range []string{"a", "b", "c", "d"} {
		r, err := runner.New(runner.Config{
			JobID: id, Session: sess, Store: store, Address: "http://127.0.0.1:1", Router: router, Logger: log,
			NewJobMaster: func(context.Context, *hastore.Leadership) (*jobmaster.JobMaster, error) {
				created <- id
				if p := proceed[id]; p != nil {
					<-p
				}
				return nil, errors.New("no JobMaster in this test")
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		runners[id] = r
		ended[id] = make(chan jobplanev1.JobStatus, 1)
	}
	admit := func(id string) {
		runners[id].Admit(ctx, gate, false, func(res jobmaster.Result, _ error) { ended[id] <- res.Status })
	}
	next := func(what string) string {
		t.Helper()
		select {
		case id := <-created:
			return id
		case <-ctx.Done():
			t.Fatalf("%s: no JobMaster asked for", what)
			return ""
		}
	}

	admit("a")
	if got := next("a's launch"); got != "a" {
		t.Fatalf("JobMaster of %s first, want a", got)
	}
	admit("b")
	admit("c")
	if n := gate.Waiting(); n != 2 {
		t.Fatalf("%d runners wait, want b and c", n)
	}
	runners["c"].Hurry()
	if got := next("c hurried"); got != "c" {
		t.Fatalf("JobMaster of %s after c was hurried, want c", got)
	}
	if n := gate.Waiting(); n != 1 {
		t.Fatalf("%d runners wait after the hurry, want b alone", n)
	}
	close(proceed["a"]) // a's term ends: its seat goes to b
	if got := next("a's seat freed"); got != "b" {
		t.Fatalf("JobMaster of %s once a's seat was free, want b", got)
	}
	if n := gate.Waiting(); n != 0 {
		t.Fatalf("%d runners wait once b was admitted, want none", n)
	}

	// b holds the seat: d waits, and the gate's close ends it.
	admit("d")
	gate.Close()
	select {
	case got := <-ended["d"]:
		if got != jobstatus.Suspended {
			t.Errorf("d ended %v, want SUSPENDED", got)
		}
	case <-ctx.Done():
		t.Fatal("d did not end once the gate closed")
	}
	close(proceed["b"])
	for _, id := range []string{"a", "b", "c"} {
		if got := <-ended[id]; got != jobstatus.Failed {
			t.Errorf("%s ended %v, want FAILED (its JobMaster could not be created)", id, got)
		}
	}
	select {
	case id := <-created:
		t.Errorf("a JobMaster of %s was asked for after the gate closed", id)
	default:
	}
}

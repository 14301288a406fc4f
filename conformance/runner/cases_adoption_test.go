package runner

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
)

// An attempt counts as adopted at a TaskExecutor only once that
// TaskExecutor has answered AdoptAttempts listing it: the call's own
// event is logged as it arrives, while the TaskExecutor may still hold
// the older token (adoption/paused-leader's CancelTask under the older
// token was accepted in that window), and an answer of one TaskExecutor
// says nothing of another.
func TestAdoptedAtWaitsForTheAnswer(t *testing.T) {
	t.Parallel()
	const job = "j"
	now := election.Token{SessionID: "s2", Epoch: 7}
	attempt := &jobplanev1.ExecutionAttemptId{VertexId: "v", SubtaskIndex: 1}
	key := attemptKey(attempt)
	e := &env{log: &Log{}}
	arrived, handle := make(chan struct{}), make(chan struct{})
	// The TaskExecutor's handler, which moves the attempt to now only
	// once it runs.
	handler := func(context.Context, connect.AnyRequest) (connect.AnyResponse, error) {
		close(arrived)
		<-handle
		return connect.NewResponse(&clusterv1.AdoptAttemptsResponse{Jobs: []*clusterv1.AdoptedJob{{JobId: job,
			Attempts: []*clusterv1.HeldAttempt{{Status: &jobplanev1.TaskExecutionStatus{Attempt: attempt, State: jobplanev1.ExecutionState_EXECUTION_STATE_RUNNING}}}}}}), nil
	}
	call := e.taskInterceptor(&taskExec{id: "te-0"})(handler)
	answered := make(chan error, 1)
	go func() {
		_, err := call(context.Background(), connect.NewRequest(&clusterv1.AdoptAttemptsRequest{Jobs: []*clusterv1.JobAdoption{{
			JobId: job, JobMasterToken: protoToken(now), JobMasterAddress: "http://jm"}}}))
		answered <- err
	}()
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the AdoptAttempts call did not reach the handler within 10s")
	}
	if got := len(e.log.Events(func(ev Event) bool { return ev.Op == "AdoptAttempts" })); got != 1 {
		t.Fatalf("AdoptAttempts events as the call arrived: got %d, want 1", got)
	}
	if adoptedAt(e.log, job, "te-0", key, now) {
		t.Errorf("adoptedAt(te-0) = true while the TaskExecutor has not handled AdoptAttempts; want false")
	}
	close(handle)
	if err := <-answered; err != nil {
		t.Fatalf("AdoptAttempts: %v", err)
	}
	for _, tc := range []struct {
		name, te, attempt string
		token             election.Token
		want              bool
	}{
		{"answered", "te-0", key, now, true},
		{"another TaskExecutor", "te-1", key, now, false},
		{"another attempt", "te-0", "v/0#0", now, false},
		{"an older token", "te-0", key, election.Token{SessionID: "s1", Epoch: 6}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := adoptedAt(e.log, job, tc.te, tc.attempt, tc.token); got != tc.want {
				t.Errorf("adoptedAt(%s, %s, %s) = %v; want %v", tc.te, tc.attempt, tc.token, got, tc.want)
			}
		})
	}
}

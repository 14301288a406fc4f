package jobmaster

import (
	"context"
	"testing"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
	"github.com/jobplane/jobplane/sdk/wire/jobstatus"
)

// Stop stops a JobMaster whose Start context lives on (the runner stops it
// so when the Dispatcher's leadership ends): it suspends, and its call in
// flight is cut off at once, not at the call's own deadline (10s).
func TestStopSuspendsAndCutsOffCalls(t *testing.T) {
	t.Parallel()
	rm := &fakeRM{block: true, started: make(chan struct{}, 1), cutOff: make(chan struct{})}
	jm := newWaitingJobMaster(t, rm)
	results := make(chan Result, 1)
	jm.Start(context.Background(), func(res Result) { results <- res })
	select {
	case <-rm.started:
	case <-time.After(5 * time.Second):
		t.Fatal("the JobMaster did not register with the ResourceManager within 5s")
	}
	jm.Stop()
	select {
	case res := <-results:
		if res.Status != jobstatus.Suspended {
			t.Errorf("the JobMaster ended %v, want SUSPENDED", res.Status)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the JobMaster did not stop within 5s of Stop")
	}
	select {
	case <-rm.cutOff:
	default:
		t.Error("the JobMaster ended with its call in flight not cut off")
	}
	jm.Stop() // again: nothing more
	if _, err := jm.Cancel(context.Background()); !apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_NOT_LEADER) {
		t.Errorf("Cancel after Stop: err = %v, want NOT_LEADER", err)
	}
}

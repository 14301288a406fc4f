package taskexecutor_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	"github.com/jobplane/jobplane/sdk/taskexecutor"
)

// Calls served before Run starts are under the TaskExecutor's lifetime
// too: an offer still waiting for its answer when Run ends is canceled,
// and Run returns. Since contract 1.2 a RequestSlot that comes before Run
// starts waits for Run to observe the ResourceManager's grant in the
// store (at most grantWait) before it allocates.
func TestRunEndsOffersMadeBeforeItStarted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fake := &jobMaster{timeout: time.Minute, offers: offerUnanswered, release: make(chan struct{})}
	jm := serveJobMaster(t, fake)
	te, client := serveUnstarted(t, taskexecutor.Config{Slots: 1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	requested := make(chan error, 1)
	go func() {
		_, err := client.RequestSlot(ctx, &clusterv1.RequestSlotRequest{
			ResourceManagerToken: token(1), AllocationId: "a", JobId: "j", JobMasterAddress: jm, JobMasterToken: token(1),
		})
		requested <- err
	}()
	time.Sleep(50 * time.Millisecond) // the call arrives before Run starts, mostly

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- te.Run(runCtx) }()
	if err := <-requested; err != nil {
		stop()
		<-done
		t.Fatal(err)
	}
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-ctx.Done():
		close(fake.release) // lets the offer, and Run, end
		<-done
		t.Fatal("Run did not return: it still waits for an offer made before it stopped")
	}
}

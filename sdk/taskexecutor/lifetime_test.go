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
// and Run returns, however early the slot was allocated.
func TestRunEndsOffersMadeBeforeItStarted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fake := &jobMaster{timeout: time.Minute, offers: offerUnanswered, release: make(chan struct{})}
	jm := serveJobMaster(t, fake)
	te, client := serveUnstarted(t, taskexecutor.Config{Slots: 1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if _, err := client.RequestSlot(ctx, &clusterv1.RequestSlotRequest{
		ResourceManagerToken: token(1), AllocationId: "a", JobId: "j", JobMasterAddress: jm, JobMasterToken: token(1),
	}); err != nil {
		t.Fatal(err)
	}

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- te.Run(runCtx) }()
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-ctx.Done():
		close(fake.release) // lets the offer, and Run, end
		<-done
		t.Fatal("Run did not return: it still waits for an offer made before it started")
	}
}

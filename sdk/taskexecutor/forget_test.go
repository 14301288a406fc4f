package taskexecutor

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
)

// A TaskExecutor's cost does not grow with the jobs it ever ran: the
// watchdog looks only at the jobs holding a slot here, and a job that
// holds nothing is forgotten after idleJobMemory (until then an older
// JobMaster token for it is still refused).
func TestJobsHoldingNothingAreForgotten(t *testing.T) {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	te, err := New(Config{Address: "http://127.0.0.1:1", Slots: 2, Store: noLeader{}, HTTPClient: http.DefaultClient, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	te.mu.Lock()
	defer te.mu.Unlock()
	te.stopped = true // no offer goes out
	allocate := func(slot int, jobID, allocationID string, epoch uint64) error {
		return te.allocateLocked(&clusterv1.SlotRequest{
			SlotIndex: int32(slot), AllocationId: allocationID, JobId: jobID, JobMasterAddress: "http://jm", JobMasterToken: &jobplanev1.FencingToken{Epoch: epoch},
		})
	}
	const jobs = 1000
	for i := range jobs {
		id := fmt.Sprintf("job-%d", i)
		if err := allocate(0, id, id+"-a", 2); err != nil {
			t.Fatal(err)
		}
		te.releaseLocked(te.slots[0], "")
	}
	if len(te.holding) != 0 {
		t.Fatalf("%d jobs in the watchdog's sight, want none: no slot is held", len(te.holding))
	}
	if err := allocate(0, "job-0", "stale", 1); !apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_STALE_FENCING_TOKEN) {
		t.Fatalf("an older token of a job that just stopped holding slots: %v, want STALE_FENCING_TOKEN", err)
	}
	if err := allocate(1, "job-1", "again", 2); err != nil {
		t.Fatal(err)
	}
	if next := te.forgetLocked(time.Now()); len(te.jobs) != jobs || next.IsZero() {
		t.Fatalf("before idleJobMemory: %d jobs known (want %d), next forget %v (want set)", len(te.jobs), jobs, next)
	}
	next := te.forgetLocked(time.Now().Add(idleJobMemory))
	if _, ok := te.jobs["job-1"]; len(te.jobs) != 1 || !ok {
		t.Fatalf("after idleJobMemory: %d jobs known, want only job-1, which holds a slot again", len(te.jobs))
	}
	if !next.IsZero() || len(te.idle) != 0 {
		t.Fatalf("next forget %v with %d idle entries, want none", next, len(te.idle))
	}
}

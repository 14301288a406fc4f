package jobmanager_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/server/internal/clustertest"
)

// WatchJob's first message is the job's current state, task counts
// included, not the summary of its last status change.
func TestWatchJobStartsWithTheCurrentState(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{})
	submit(t, c, "watched", &jobplanev1.JobGraph{Vertices: []*jobplanev1.JobVertex{{Id: "v", Invokable: "sleep", Parallelism: 2, Config: map[string]string{"duration": "1h"}}}})
	running := func(s *jobplanev1.JobSummary) int32 {
		for _, n := range s.GetTaskCounts() {
			if n.GetState() == jobplanev1.ExecutionState_EXECUTION_STATE_RUNNING {
				return n.GetCount()
			}
		}
		return 0
	}
	waitJob(t, c, "watched", func(d *jobplanev1.JobDetails) bool { return running(d.GetSummary()) == 2 })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := c.Dispatcher.WatchJob(ctx, &jobplanev1.WatchJobRequest{JobId: "watched"})
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() {
		t.Fatalf("no first message: %v", stream.Err())
	}
	first := stream.Msg().GetJob()
	if first.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_RUNNING || running(first) != 2 {
		t.Errorf("first message = %v, want RUNNING with 2 subtasks RUNNING", first)
	}
}

// GetClusterOverview names the leader by its address as well as its token.
func TestClusterOverviewNamesTheLeader(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := c.Dispatcher.GetClusterOverview(ctx, &jobplanev1.GetClusterOverviewRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.GetLeader().GetAddress(); got != c.URL {
		t.Errorf("leader address = %q, want %q", got, c.URL)
	}
	if resp.GetLeader().GetToken().GetEpoch() == 0 {
		t.Error("no leader token")
	}
}

// A job's slots are free when its result is written: the next job finds
// them free at once, without waiting for the TaskExecutors' next reports.
func TestSlotsFreeWhenResultIsWritten(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{TaskExecutors: 1, Slots: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := range 5 {
		id := fmt.Sprintf("quick-%d", i)
		submit(t, c, id, &jobplanev1.JobGraph{Vertices: []*jobplanev1.JobVertex{{Id: "v", Invokable: "noop", Parallelism: 2}}})
		if res := result(t, c, id); res.GetStatus() != jobplanev1.JobStatus_JOB_STATUS_FINISHED {
			t.Fatalf("%s: %v", id, res)
		}
		resp, err := c.Dispatcher.GetClusterOverview(ctx, &jobplanev1.GetClusterOverviewRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetSlotsAvailable() != resp.GetSlotsTotal() || resp.GetSlotsTotal() != 2 {
			t.Fatalf("right after %s's result: %d of %d slots free, want all 2", id, resp.GetSlotsAvailable(), resp.GetSlotsTotal())
		}
	}
}

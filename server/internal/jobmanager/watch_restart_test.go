package jobmanager_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/server/localcluster"
)

const running = jobplanev1.JobStatus_JOB_STATUS_RUNNING

// regionRestarts is a job of two regions: "flaky" fails (after delay) on
// the attempts listed (every one when failing is empty), "steady" sleeps for an hour. A failure of flaky
// restarts its region alone, so the job stays RUNNING.
func regionRestarts(failing string, delay string, strategy *jobplanev1.RestartStrategy_FixedDelay) *jobplanev1.JobGraph {
	flaky := map[string]string{"delay": delay, "message": "boom"}
	if failing != "" {
		flaky["attempts"] = failing
	}
	return &jobplanev1.JobGraph{
		Vertices: []*jobplanev1.JobVertex{
			{Id: "flaky", Invokable: "fail", Parallelism: 1, Config: flaky},
			{Id: "steady", Invokable: "sleep", Parallelism: 1, Config: map[string]string{"duration": "1h"}},
		},
		Config: &jobplanev1.JobConfig{RestartStrategy: &jobplanev1.RestartStrategy{
			Strategy: &jobplanev1.RestartStrategy_FixedDelay_{FixedDelay: strategy}}},
	}
}

// WatchJob sends a message when the restart count grows while the job
// stays RUNNING (a region restart is no status change), with the failure
// that caused it; each message is a resume point.
func TestWatchJobReportsRegionRestarts(t *testing.T) {
	c := newCluster(t, localcluster.Config{})
	submit(t, c, "restarting", regionRestarts("0,1,2", "20ms",
		&jobplanev1.RestartStrategy_FixedDelay{Attempts: 3, Delay: durationpb.New(10 * time.Millisecond)}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := c.Dispatcher().WatchJob(ctx, &jobplanev1.WatchJobRequest{JobId: "restarting"})
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	var got []*jobplanev1.WatchJobResponse
	canceled := false
	for stream.Receive() {
		m := stream.Msg()
		s := m.GetJob()
		if s == nil {
			continue
		}
		got = append(got, m)
		if s.GetStatus() == running && s.GetRestartCount() == 3 && !canceled {
			// The last restart the strategy allows was reported while
			// the job runs: end it.
			canceled = true
			if _, err := c.Dispatcher().CancelJob(ctx, &jobplanev1.CancelJobRequest{JobId: "restarting"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("watch: %v", err)
	}
	if !canceled {
		t.Fatalf("no RUNNING message with restart count 3; messages: %v", summaries(got))
	}
	var restarts []int32
	for i, m := range got {
		s := m.GetJob()
		if s.GetStatus() == jobplanev1.JobStatus_JOB_STATUS_RESTARTING {
			t.Errorf("message %d: RESTARTING; a region restart is no job status change", i)
		}
		if i > 0 && s.GetRestartCount() < got[i-1].GetJob().GetRestartCount() {
			t.Errorf("message %d: restart count %d after %d", i, s.GetRestartCount(), got[i-1].GetJob().GetRestartCount())
		}
		if s.GetStatus() == running && s.GetRestartCount() > 0 {
			restarts = append(restarts, s.GetRestartCount())
			if s.GetFailure().GetMessage() != "boom" || s.GetFailure().GetAttempt().GetVertexId() != "flaky" {
				t.Errorf("restart message %d: failure %v, want flaky's boom", i, s.GetFailure())
			}
			if i > 0 && got[i-1].GetJob().GetStatus() == running && s.GetRestartCount() == got[i-1].GetJob().GetRestartCount() {
				t.Errorf("message %d repeats restart count %d", i, s.GetRestartCount())
			}
		}
		if m.GetResumeToken() == "" {
			t.Errorf("message %d has no resume token", i)
		}
	}
	if len(restarts) == 0 || restarts[len(restarts)-1] != 3 {
		t.Errorf("restart counts while RUNNING = %v, want them to grow to 3", restarts)
	}
	if last := got[len(got)-1].GetJob().GetStatus(); last != jobplanev1.JobStatus_JOB_STATUS_CANCELED {
		t.Errorf("last status %v, want CANCELED", last)
	}

	// Resumed after the first restart message, the watch goes on from
	// there, not coalesced, with what the job did since.
	var first *jobplanev1.WatchJobResponse
	for _, m := range got {
		if m.GetJob().GetRestartCount() > 0 {
			first = m
			break
		}
	}
	rest, err := watchAll(ctx, c, "restarting", first.GetResumeToken(), 100)
	if err != nil || len(rest) == 0 {
		t.Fatalf("resumed watch = %v, %v", summaries(rest), err)
	}
	for _, m := range rest {
		if m.GetCoalesced() || m.GetJob().GetRestartCount() < first.GetJob().GetRestartCount() {
			t.Errorf("resumed after restart %d: %v", first.GetJob().GetRestartCount(), summaries(rest))
			break
		}
	}
	if rest[len(rest)-1].GetJob().GetStatus() != jobplanev1.JobStatus_JOB_STATUS_CANCELED {
		t.Errorf("resumed watch ends with %v, want CANCELED", summaries(rest))
	}
}

// A job whose region restarts for ever, at once, keeps what a watch can
// resume from bounded, and a watch that stopped reading meanwhile is not
// left behind: it resumes exactly, and the restarts it missed come as
// one message that counts them all.
func TestWatchJobCoalescesRestarts(t *testing.T) {
	c := newCluster(t, localcluster.Config{})
	submit(t, c, "crashloop", regionRestarts("", "0s", &jobplanev1.RestartStrategy_FixedDelay{Unlimited: true}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	waitJob(t, c, "crashloop", func(d *jobplanev1.JobDetails) bool {
		return d.GetSummary().GetStatus() == running
	})
	first, err := watchAll(ctx, c, "crashloop", "", 1)
	if err != nil || len(first) != 1 {
		t.Fatalf("first watch = %v, %v", summaries(first), err)
	}
	seen := first[0].GetJob().GetRestartCount()
	waitJob(t, c, "crashloop", func(d *jobplanev1.JobDetails) bool {
		return d.GetSummary().GetRestartCount() > seen+2*64 // past the history's bound, were each restart kept
	})
	resumed, err := watchAll(ctx, c, "crashloop", first[0].GetResumeToken(), 1)
	if err != nil || len(resumed) != 1 {
		t.Fatalf("resumed watch = %v, %v", summaries(resumed), err)
	}
	if m := resumed[0]; m.GetCoalesced() || m.GetJob().GetStatus() != running || m.GetJob().GetRestartCount() <= seen+2*64 {
		t.Errorf("resumed after restart %d: %v (coalesced %v); want the restarts since, in one message, not coalesced",
			seen, summaries(resumed), m.GetCoalesced())
	}
	if _, err := c.Dispatcher().CancelJob(ctx, &jobplanev1.CancelJobRequest{JobId: "crashloop"}); err != nil {
		t.Fatal(err)
	}
}

// summaries describes watch messages for failure reports.
func summaries(ms []*jobplanev1.WatchJobResponse) []string {
	var out []string
	for _, m := range ms {
		s := m.GetJob()
		out = append(out, fmt.Sprintf("%v/%d", s.GetStatus(), s.GetRestartCount()))
	}
	return out
}

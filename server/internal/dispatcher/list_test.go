package dispatcher

import (
	"context"
	"encoding/base64"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/wire/jobstatus"
)

// A client paging through 5,000 jobs with cursors sees each of them
// exactly once, newest first, although jobs are submitted and change status
// between its pages.
func TestListJobsPagesWhileJobsAreAdded(t *testing.T) {
	t.Parallel()
	d, ld := newTestLeadership(t)
	const n = 5000
	fillIndex(ld, n)
	h := NewHandler(d)
	ctx := context.Background()

	base := time.Unix(1_700_000_000, 0)
	added := 0
	var got []string
	token := ""
	for pages := 0; ; pages++ {
		if pages > n {
			t.Fatal("paging does not end")
		}
		resp, err := h.ListJobs(ctx, &jobplanev1.ListJobsRequest{PageSize: int32(1 + pages%150), PageToken: token})
		if err != nil {
			t.Fatalf("page %d: %v", pages, err)
		}
		for _, s := range resp.GetJobs() {
			got = append(got, s.GetJobId())
		}
		token = resp.GetNextPageToken()
		if token == "" {
			break
		}
		// Between pages: new submissions, and status changes of jobs
		// already listed and not yet listed.
		d.mu.Lock()
		for range 7 {
			ld.acceptLocked(newTestJob(fmt.Sprintf("new-%05d", added), base.Add(time.Duration(n+added)*time.Millisecond), jobstatus.Initializing))
			added++
		}
		for k := range 3 {
			j := ld.jobs[fmt.Sprintf("job-%07d", (pages*31+k*1013)%n)]
			ld.setStatusLocked(j, allStatuses[(pages+k)%len(allStatuses)])
		}
		d.mu.Unlock()
	}
	if len(got) != n {
		t.Errorf("listed %d jobs, want %d", len(got), n)
	}
	seen := map[string]bool{}
	for i, id := range got {
		if seen[id] {
			t.Fatalf("job %s listed twice", id)
		}
		seen[id] = true
		if want := fmt.Sprintf("job-%07d", n-1-i); id != want {
			t.Fatalf("job %d listed is %s, want %s (newest first, no gap)", i, id, want)
		}
	}
	if added == 0 {
		t.Fatal("no job was added while paging")
	}
}

// ListJobs keeps its wire contract: page sizes (0 means 100, more than
// 1000 means 1000, negative is refused), a status filter, and
// INVALID_ARGUMENT for a page token this server did not issue, including
// the offset tokens of earlier servers.
func TestListJobsContract(t *testing.T) {
	t.Parallel()
	d, ld := newTestLeadership(t)
	fillIndex(ld, 1200) // statuses in turn, as allStatuses lists them
	h := NewHandler(d)
	ctx := context.Background()

	sizes := []struct {
		name     string
		size     int32
		statuses []jobplanev1.JobStatus
		want     int
		more     bool
	}{
		{"default", 0, nil, 100, true},
		{"capped", 5000, nil, 1000, true},
		{"exact", 1200, nil, 1000, true},
		{"one status", 1000, []jobplanev1.JobStatus{jobstatus.Running}, 120, false},
		{"two statuses, repeated", 1000, []jobplanev1.JobStatus{jobstatus.Running, jobstatus.Failed, jobstatus.Running}, 240, false},
		{"a status no job has", 10, []jobplanev1.JobStatus{jobplanev1.JobStatus_JOB_STATUS_UNSPECIFIED}, 0, false},
	}
	for _, tc := range sizes {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			resp, err := h.ListJobs(ctx, &jobplanev1.ListJobsRequest{PageSize: tc.size, Statuses: tc.statuses})
			if err != nil {
				t.Fatal(err)
			}
			if got := len(resp.GetJobs()); got != tc.want {
				t.Errorf("listed %d jobs, want %d", got, tc.want)
			}
			if more := resp.GetNextPageToken() != ""; more != tc.more {
				t.Errorf("next page token %q, want one: %v", resp.GetNextPageToken(), tc.more)
			}
			for i, s := range resp.GetJobs() {
				if len(tc.statuses) > 0 && s.GetStatus() != jobstatus.Running && s.GetStatus() != jobstatus.Failed {
					t.Errorf("listed %s in %v, not asked for", s.GetJobId(), s.GetStatus())
				}
				if i > 0 && s.GetJobId() >= resp.GetJobs()[i-1].GetJobId() {
					t.Errorf("%s listed after %s: not newest first", s.GetJobId(), resp.GetJobs()[i-1].GetJobId())
				}
			}
		})
	}

	b64 := base64.RawURLEncoding.EncodeToString
	bad := []struct{ name, size, token string }{
		{"offset token of an earlier server", "", b64([]byte("100"))},
		{"not base64", "", "!!"},
		{"empty after decoding", "", "AA"},
		{"other version", "", b64(append([]byte{2, 0, 0, 0, 0, 0, 0, 0, 0}, "j"...))},
		{"no job id", "", b64([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0})},
		{"invalid job id", "", b64(append([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0}, "a/b"...))},
		{"negative page size", "-1", ""},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req := &jobplanev1.ListJobsRequest{PageToken: tc.token}
			if tc.size != "" {
				req.PageSize = -1
			}
			_, err := h.ListJobs(ctx, req)
			if got := connect.CodeOf(err); got != connect.CodeInvalidArgument {
				t.Errorf("ListJobs = %v, want INVALID_ARGUMENT", err)
			}
		})
	}
}

// GetClusterOverview counts jobs by status from the index: finished,
// canceled and failed apart, every other status as running; jobs not yet
// accepted are not counted.
func TestOverviewCounts(t *testing.T) {
	t.Parallel()
	d, ld := newTestLeadership(t)
	fillIndex(ld, 1000) // 100 in each of the 10 statuses
	d.mu.Lock()
	ld.jobs["pending"] = newTestJob("pending", time.Now(), jobstatus.Initializing)
	ld.setStatusLocked(ld.jobs["job-0000002"], jobstatus.Finished) // was RUNNING
	ld.forgetLocked(ld.jobs["job-0000004"])                        // was FAILED
	d.mu.Unlock()
	resp, err := NewHandler(d).GetClusterOverview(context.Background(), &jobplanev1.GetClusterOverviewRequest{})
	if err != nil {
		t.Fatal(err)
	}
	got := [4]int32{resp.GetRunningJobCount(), resp.GetFinishedJobCount(), resp.GetCanceledJobCount(), resp.GetFailedJobCount()}
	if want := [4]int32{699, 101, 100, 99}; got != want {
		t.Errorf("running, finished, canceled, failed = %v, want %v", got, want)
	}
}

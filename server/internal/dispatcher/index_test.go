package dispatcher

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/sdk/wire/jobstatus"
	"github.com/jobplane/jobplane/server/hastore"
)

// allStatuses are the job statuses a job can be recorded in.
var allStatuses = []jobplanev1.JobStatus{
	jobstatus.Initializing, jobstatus.Created, jobstatus.Running, jobstatus.Failing, jobstatus.Failed,
	jobstatus.Cancelling, jobstatus.Canceled, jobstatus.Finished, jobstatus.Restarting, jobstatus.Suspended,
}

// newTestLeadership returns a Dispatcher leading under a leadership of no
// store, valid until the test ends, with recovery done: enough for the
// queries, which read only the leadership's jobs and index.
func newTestLeadership(tb testing.TB) (*Dispatcher, *leadership) {
	tb.Helper()
	l, end := hastore.NewLeadership(context.Background(), hastore.Fence{Election: election.JobManager}, nil, nil)
	tb.Cleanup(func() { end(hastore.ErrResigned) })
	ld := &leadership{l: l, ctx: l.Context(), ready: closedChan(), jobs: make(map[string]*job), index: newJobIndex()}
	d := &Dispatcher{log: slog.New(slog.NewTextHandler(io.Discard, nil)), lead: ld}
	return d, ld
}

// newTestJob returns a job as submitted or recovered, not yet accepted.
func newTestJob(id string, submit time.Time, status jobplanev1.JobStatus) *job {
	j := &job{id: id, submitNanos: submit.UnixNano(), persisting: make(chan struct{})}
	j.history = newHistory(&jobplanev1.JobSummary{JobId: id, Status: status})
	return j
}

// acceptLocked does what startLocked and recover do with an accepted job:
// it becomes visible to the queries.
func (ld *leadership) acceptLocked(j *job) {
	ld.jobs[j.id] = j
	close(j.persisting)
	ld.index.add(j)
}

// setStatusLocked records a status change as the runner's callback or
// finish would.
func (ld *leadership) setStatusLocked(j *job, s jobplanev1.JobStatus) {
	ld.recordLocked(j, &jobplanev1.JobSummary{JobId: j.id, Status: s})
}

// modelJob is the brute-force model of one job.
type modelJob struct {
	j        *job
	accepted bool
}

// bruteList lists the model's accepted jobs as the index must: filtered,
// newest submission first, then by id.
func bruteList(model map[string]*modelJob, statuses []jobplanev1.JobStatus) []string {
	var js []*job
	for _, m := range model {
		if m.accepted && (len(statuses) == 0 || slices.Contains(statuses, m.j.latest().GetStatus())) {
			js = append(js, m.j)
		}
	}
	slices.SortFunc(js, func(a, b *job) int {
		if c := b.submitted().Compare(a.submitted()); c != 0 {
			return c
		}
		return cmp.Compare(a.id, b.id)
	})
	ids := make([]string, len(js))
	for i, j := range js {
		ids[i] = j.id
	}
	return ids
}

// pageAll lists every page of the index with random page sizes.
func pageAll(ix *jobIndex, rng *rand.Rand, statuses []jobplanev1.JobStatus) []string {
	var ids []string
	var after *Cursor
	for {
		jobs, more := ix.page(statuses, after, 1+rng.IntN(7))
		for _, j := range jobs {
			ids = append(ids, j.id)
		}
		if !more {
			return ids
		}
		last := jobs[len(jobs)-1]
		after = &Cursor{SubmitTime: last.submitted(), JobID: last.id}
	}
}

// The index's counts and pages match a brute-force count and sort of the
// jobs after every step of a random history of submissions (accepted, or
// undone by a failed persist), status changes (before and after
// acceptance), results, recoveries and retention deletions.
func TestIndexMatchesBruteForce(t *testing.T) {
	t.Parallel()
	for seed := range uint64(20) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(seed, seed))
			_, ld := newTestLeadership(t)
			model := map[string]*modelJob{}
			var ids []string // every id ever used, to pick from
			base := time.Unix(1_700_000_000, 0)
			var history []string
			for step := range 600 {
				var op string
				switch r := rng.IntN(100); {
				case r < 30 || len(ids) == 0: // a submission or a recovered job
					id := fmt.Sprintf("j%d", len(ids))
					ids = append(ids, id)
					// Few distinct submit times, so that ties fall to the id.
					j := newTestJob(id, base.Add(time.Duration(rng.IntN(40))*time.Millisecond), allStatuses[rng.IntN(len(allStatuses))])
					ld.jobs[id] = j
					model[id] = &modelJob{j: j}
					op = "submit " + id
					if rng.IntN(4) > 0 {
						ld.acceptLocked(j)
						model[id].accepted = true
						op += " accepted"
					}
				case r < 40: // a pending submission is accepted or undone
					m := model[ids[rng.IntN(len(ids))]]
					if m == nil || m.accepted {
						continue
					}
					if rng.IntN(2) == 0 {
						ld.acceptLocked(m.j)
						m.accepted = true
						op = "accept " + m.j.id
					} else {
						ld.forgetLocked(m.j)
						delete(model, m.j.id)
						op = "persist failed " + m.j.id
					}
				case r < 85: // a status change, a result, or a repeat
					m := model[ids[rng.IntN(len(ids))]]
					if m == nil {
						continue
					}
					s := allStatuses[rng.IntN(len(allStatuses))]
					if rng.IntN(5) == 0 {
						s = m.j.latest().GetStatus()
					}
					ld.setStatusLocked(m.j, s)
					op = fmt.Sprintf("status %s %v", m.j.id, s)
				default: // a result deleted by retention
					m := model[ids[rng.IntN(len(ids))]]
					if m == nil || !m.accepted {
						continue
					}
					ld.forgetLocked(m.j)
					ld.index.remove(m.j) // a second removal changes nothing
					delete(model, m.j.id)
					op = "expire " + m.j.id
				}
				history = append(history, op)
				counts := map[jobplanev1.JobStatus]int{}
				total := 0
				for _, m := range model {
					if m.accepted {
						counts[m.j.latest().GetStatus()]++
						total++
					}
				}
				if got := ld.index.len(); got != total {
					t.Fatalf("step %d: len = %d, want %d\nhistory:\n%v", step, got, total, history)
				}
				for _, s := range allStatuses {
					if got := ld.index.count(s); got != counts[s] {
						t.Fatalf("step %d: count(%v) = %d, want %d\nhistory:\n%v", step, s, got, counts[s], history)
					}
				}
				if step%10 != 0 {
					continue
				}
				filters := [][]jobplanev1.JobStatus{
					nil,
					{allStatuses[rng.IntN(len(allStatuses))]},
					{allStatuses[rng.IntN(len(allStatuses))], allStatuses[rng.IntN(len(allStatuses))], jobstatus.Finished},
				}
				for _, f := range filters {
					got, want := pageAll(ld.index, rng, f), bruteList(model, f)
					if !slices.Equal(got, want) {
						t.Fatalf("step %d: pages(%v) = %v, want %v\nhistory:\n%v", step, f, got, want, history)
					}
				}
			}
		})
	}
}

// fillIndex accepts n jobs, one a millisecond, in a mix of statuses.
func fillIndex(ld *leadership, n int) {
	base := time.Unix(1_700_000_000, 0)
	for i := range n {
		j := newTestJob(fmt.Sprintf("job-%07d", i), base.Add(time.Duration(i)*time.Millisecond), allStatuses[i%len(allStatuses)])
		ld.acceptLocked(j)
	}
}

// Overview and a page of ListJobs cost the same whatever the number of
// jobs: ns/op should stay flat from 1,000 to 100,000 jobs.
func BenchmarkQueries(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 100_000} {
		d, ld := newTestLeadership(b)
		fillIndex(ld, n)
		h := NewHandler(d)
		ctx := context.Background()
		b.Run(fmt.Sprintf("Overview/n=%d", n), func(b *testing.B) {
			for b.Loop() {
				if _, err := h.GetClusterOverview(ctx, &jobplanev1.GetClusterOverviewRequest{}); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("ListJobs/page=100/n=%d", n), func(b *testing.B) {
			for b.Loop() {
				if _, err := h.ListJobs(ctx, &jobplanev1.ListJobsRequest{PageSize: 100}); err != nil {
					b.Fatal(err)
				}
			}
		})
		// A page in the middle of the list, as a client paging through it
		// asks for.
		mid := ld.jobs[fmt.Sprintf("job-%07d", n/2)]
		token := encodeListCursor(Cursor{SubmitTime: mid.submitted(), JobID: mid.id})
		b.Run(fmt.Sprintf("ListJobs/page=100/middle/n=%d", n), func(b *testing.B) {
			for b.Loop() {
				if _, err := h.ListJobs(ctx, &jobplanev1.ListJobsRequest{PageSize: 100, PageToken: token}); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("ListJobs/page=100/status=RUNNING,FAILED/n=%d", n), func(b *testing.B) {
			for b.Loop() {
				if _, err := h.ListJobs(ctx, &jobplanev1.ListJobsRequest{PageSize: 100, Statuses: []jobplanev1.JobStatus{jobstatus.Running, jobstatus.Failed}}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

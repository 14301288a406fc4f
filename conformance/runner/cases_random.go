package runner

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/internal/chaos"
)

// seedKey is the context key of the run's seed (Config.Seed).
type seedKey struct{}

// seedOf returns the run's seed.
func seedOf(ctx context.Context) uint64 {
	s, _ := ctx.Value(seedKey{}).(uint64)
	return s
}

// The random schedule's bounds: each client makes randomOps operations,
// and the store faults a call with probability randomP, at most
// randomBudget times.
const (
	randomClients      = 4
	randomOpsPerClient = 12
	randomP            = 0.25
	randomBudget       = 60
)

// randomHistory is what the clients of faults/random-schedule did and
// saw: the porcupine history of their calls.
type randomHistory struct{ rec *chaos.Recorder }

// randomOp is one client operation: a submission of a new job with its
// graph, or a cancel or an observation of a job.
type randomOp struct {
	kind  string // "submit", "cancel", "get-job", "get-result"
	id    string
	graph *jobplanev1.JobGraph
}

// randomOps draws each client's operations from the seed alone: a job
// canceled or observed at a client's n-th operation is one that some
// client submits before its own n-th, so the operations are the same in
// every run with the seed (when each is made still varies).
func (t *T) randomOps(seed uint64) (ops [][]randomOp, jobs []string) {
	rs := make([]*rand.Rand, randomClients)
	ops = make([][]randomOp, randomClients)
	for c := range rs {
		rs[c] = rand.New(rand.NewPCG(seed, uint64(c)))
	}
	var pool []string
	for n := range randomOpsPerClient {
		var added []string
		for c, r := range rs {
			op := randomOp{}
			switch x := r.IntN(100); {
			case x < 45 || len(pool) == 0:
				op.kind, op.id, op.graph = "submit", t.job(fmt.Sprintf("%d-%d", c, n)), noopGraph(1)
				if r.IntN(2) == 0 {
					op.graph = gatedGraph(1, "never")
				}
				added = append(added, op.id)
			case x < 70:
				op.kind, op.id = "cancel", pool[r.IntN(len(pool))]
			case x < 85:
				op.kind, op.id = "get-job", pool[r.IntN(len(pool))]
			default:
				op.kind, op.id = "get-result", pool[r.IntN(len(pool))]
			}
			ops[c] = append(ops[c], op)
		}
		pool = append(pool, added...)
	}
	return ops, pool
}

// call makes one Dispatcher call through the runner's recorded client,
// and records it in the history too.
func (t *T) recordedCall(h *randomHistory, req any, timeout time.Duration) (any, error) {
	in, _ := chaos.InputOf(req)
	p := h.rec.Call(in)
	ctx, cancel := context.WithTimeout(t.ctx, timeout)
	defer cancel()
	var resp any
	d, err := t.env.dispatcher(ctx)
	if err == nil {
		switch m := req.(type) {
		case *jobplanev1.SubmitJobRequest:
			resp, err = d.SubmitJob(ctx, m)
		case *jobplanev1.CancelJobRequest:
			resp, err = d.CancelJob(ctx, m)
		case *jobplanev1.GetJobRequest:
			resp, err = d.GetJob(ctx, m)
		case *jobplanev1.GetJobResultRequest:
			resp, err = d.GetJobResult(ctx, m)
		}
	}
	if err != nil {
		resp = nil
	}
	p.Return(chaos.OutputOf(resp, err))
	return resp, err
}

// randomSchedule: three clients submit, cancel and observe jobs while
// the store faults the server's calls on a random schedule; then the
// faults stop, every job that may exist is driven to its end, and the
// history is judged.
func randomSchedule(t *T) {
	seed := seedOf(t.ctx)
	replay := fmt.Sprintf("seed %d; replay with --seed %d --run faults/random-schedule", seed, seed)
	h := &randomHistory{rec: chaos.NewRecorder()}
	ops, jobs := t.randomOps(seed)
	sc := newSchedule(seed, randomP, randomBudget)
	t.env.store.startSchedule(sc)
	var wg sync.WaitGroup
	for _, mine := range ops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, op := range mine {
				switch op.kind {
				case "submit":
					// As a client with retries: an unknown outcome is
					// asked again, the same submission.
					for range 3 {
						_, err := t.recordedCall(h, &jobplanev1.SubmitJobRequest{JobId: op.id, JobGraph: op.graph}, 5*time.Second)
						if err == nil || chaos.OutcomeOf(err) != chaos.Unknown {
							break
						}
					}
				case "cancel":
					_, _ = t.recordedCall(h, &jobplanev1.CancelJobRequest{JobId: op.id}, 5*time.Second)
				case "get-job":
					_, _ = t.recordedCall(h, &jobplanev1.GetJobRequest{JobId: op.id}, 5*time.Second)
				case "get-result":
					_, _ = t.recordedCall(h, &jobplanev1.GetJobResultRequest{JobId: op.id}, 5*time.Second)
				}
			}
		}()
	}
	wg.Wait()
	t.env.store.stopSchedule()

	// The end: each job that exists is canceled if it still runs, and its
	// result read, every call recorded.
	finals := map[string]jobplanev1.JobStatus{}
	deadline := time.Now().Add(20 * time.Second)
	for _, id := range jobs {
		if st, ok := t.randomEnd(h, id, deadline); ok {
			finals[id] = st
		}
	}

	if err := chaos.CheckHistory(h.rec.Operations(), 10*time.Second, ""); err != nil {
		t.Errorf("the clients' history under %d random store faults breaks the contract (%s): %v", sc.faults(), replay, err)
	}
	for _, id := range jobs {
		t.judgeRandomJob(id, finals, replay)
	}
}

// randomEnd drives job id to its end and reads its result, and reports
// the result's status, and false if the job does not exist (none of its
// submissions took effect) or did not end by deadline (20s after the
// faults stopped, for all the jobs).
func (t *T) randomEnd(h *randomHistory, id string, deadline time.Time) (jobplanev1.JobStatus, bool) {
	canceled := false
	for time.Now().Before(deadline) && t.ctx.Err() == nil {
		resp, err := t.recordedCall(h, &jobplanev1.GetJobRequest{JobId: id}, 3*time.Second)
		switch {
		case chaos.OutcomeOf(err) == chaos.NotFound:
			return 0, false
		case err != nil:
			time.Sleep(50 * time.Millisecond)
			continue
		case !terminalStatus(resp.(*jobplanev1.GetJobResponse).GetJob().GetSummary().GetStatus()) && !canceled:
			_, err := t.recordedCall(h, &jobplanev1.CancelJobRequest{JobId: id}, 3*time.Second)
			canceled = err == nil || chaos.OutcomeOf(err) == chaos.JobTerminal
		}
		resp, err = t.recordedCall(h, &jobplanev1.GetJobResultRequest{JobId: id, Wait: true}, 3*time.Second)
		if err == nil {
			return resp.(*jobplanev1.GetJobResultResponse).GetResult().GetStatus(), true
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Errorf("job %s had not ended 20s after the faults stopped (canceled: %v); expected every job to end", id, canceled)
	return 0, false
}

// judgeRandomJob checks job id's store writes and runs: it ended once,
// with one status (every result written for it has the status its
// result is read with), and nothing of it ran after its result.
func (t *T) judgeRandomJob(id string, finals map[string]jobplanev1.JobStatus, replay string) {
	evs := t.env.log.Events(func(e Event) bool { return e.Key == id })
	var statuses []string
	dirty := -1
	for _, e := range evs {
		if e.Op == "create-dirty" && e.Applied {
			if dirty < 0 {
				dirty = e.Seq
			}
			if st := strings.TrimPrefix(e.Status.String(), "JOB_STATUS_"); !slices.Contains(statuses, st) {
				statuses = append(statuses, st)
			}
		}
	}
	final, ended := finals[id]
	switch {
	case len(statuses) > 1:
		t.Errorf("job %s: results written with statuses %v (%s); expected a job to end once, with one status", id, statuses, replay)
	case ended && len(statuses) == 0:
		t.Errorf("job %s: its result reads %v, but no result of it was written to the store (%s); expected a result only once it is durable", id, final, replay)
	case ended && statuses[0] != strings.TrimPrefix(final.String(), "JOB_STATUS_"):
		t.Errorf("job %s: its result reads %v, the store's says %s (%s); expected one status", id, final, statuses[0], replay)
	}
	if dirty < 0 {
		return
	}
	for _, e := range evs {
		if e.Seq > dirty && (e.Op == "attempt-start" || e.Op == "SubmitTask") {
			t.Errorf("job %s: %v after its result was written (#%d) (%s); expected nothing of a job to run after its result", id, e, dirty, replay)
			return
		}
	}
}

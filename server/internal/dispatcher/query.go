package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/sdk/wire/jobstatus"
	"github.com/jobplane/jobplane/sdk/wire/taskvalue"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/internal/jobmaster"
)

// ErrJobNotFound: no job with this id is known.
var ErrJobNotFound = errors.New("dispatcher: job not found")

// TerminalError says a job already ended in a status that forbids the
// operation (for example cancelling a FINISHED job).
type TerminalError struct {
	JobID  string
	Status jobplanev1.JobStatus
}

func (e *TerminalError) Error() string {
	return fmt.Sprintf("dispatcher: job %s is %v", e.JobID, e.Status)
}

// NotTerminalError says a job has no result yet.
type NotTerminalError struct {
	JobID  string
	Status jobplanev1.JobStatus
}

func (e *NotTerminalError) Error() string {
	return fmt.Sprintf("dispatcher: job %s is %v, not terminal", e.JobID, e.Status)
}

// RunNotFoundError says the job id's current job is not the run a
// request named. errors.Is(err, ErrJobNotFound) is true for it.
type RunNotFoundError struct {
	JobID, RunID string
}

func (e *RunNotFoundError) Error() string {
	return fmt.Sprintf("dispatcher: job %s has no run %s", e.JobID, e.RunID)
}

// Is makes errors.Is(err, ErrJobNotFound) true for a RunNotFoundError.
func (e *RunNotFoundError) Is(target error) bool { return target == ErrJobNotFound }

// findRun is find, and with a run id, only that run of the id: another
// run is a *RunNotFoundError.
func (d *Dispatcher) findRun(ctx context.Context, jobID, runID string) (*leadership, *job, error) {
	ld, j, err := d.find(ctx, jobID)
	if err == nil && runID != "" && j.runID != runID {
		return nil, nil, &RunNotFoundError{JobID: jobID, RunID: runID}
	}
	return ld, j, err
}

func (d *Dispatcher) find(ctx context.Context, jobID string) (*leadership, *job, error) {
	ld, err := d.current(ctx)
	if err != nil {
		return nil, nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	j := ld.jobs[jobID]
	if j == nil {
		return nil, nil, ErrJobNotFound
	}
	select {
	case <-j.persisting:
	default:
		return nil, nil, ErrJobNotFound // not accepted yet
	}
	return ld, j, nil
}

// Owner returns the principal that submitted a job: empty when the job
// was submitted while authentication was off; ErrJobNotFound when there
// is no such job.
func (d *Dispatcher) Owner(ctx context.Context, jobID string) (string, error) {
	_, j, err := d.find(ctx, jobID)
	if err != nil {
		return "", err
	}
	return j.owner, nil
}

// CancelRequest is what a CancelJob asks beside the job id: the run it
// means (empty for the current one), and its id and reason, recorded with
// the request.
type CancelRequest struct {
	RunID, RequestID, Reason string
}

// Cancel cancels a job and returns its status right after.
func (d *Dispatcher) Cancel(ctx context.Context, jobID string) (jobplanev1.JobStatus, error) {
	return d.CancelRun(ctx, jobID, CancelRequest{})
}

// CancelRun cancels a job, only the run req names if it names one, and
// records req's id and reason with the request: the store keeps the first
// request's, and the job shows it (JobSummary.cancellation,
// JobResult.cancellation).
func (d *Dispatcher) CancelRun(ctx context.Context, jobID string, req CancelRequest) (jobplanev1.JobStatus, error) {
	ld, j, err := d.findRun(ctx, jobID, req.RunID)
	if err != nil {
		return 0, err
	}
	record := &jobplanev1.Cancellation{RequestId: req.RequestID, Reason: req.Reason, RequestedTime: timestamppb.Now()}
	d.mu.Lock()
	result, r := j.result, j.runner
	d.mu.Unlock()
	if result != nil {
		return terminalCancel(jobID, result)
	}
	// The request is made durable before anything is done for it, so that
	// a leader that recovers the job cancels it too.
	if err := d.requestCancel(ld, jobID, record); err != nil {
		if !errors.Is(err, hastore.ErrPlanNotFound) && !errors.Is(err, hastore.ErrJobTerminal) {
			return 0, err
		}
		// The job ended meanwhile: its result is written with the plan's
		// removal, and recorded here once that write answered. The answer
		// waits for that even when the store named the result's status
		// (its result came first, in the store's order): a result whose
		// write's answer was lost is recorded here only once the write is
		// retried, and until then this Dispatcher would show the job
		// running after answering it terminal. A plan that never was (a
		// server that answered before persisting) gets no result: the wait
		// is bounded.
		wait := time.NewTimer(d.cfg.PersistTimeout)
		defer wait.Stop()
		d.mu.Lock()
		done := j.doneLocked()
		d.mu.Unlock()
		select {
		case <-done:
		case <-wait.C:
			return 0, fmt.Errorf("%w: the job's plan is gone and its result not recorded yet", ErrCancelNotRecorded)
		case <-ld.ctx.Done():
			return 0, ErrNotLeading
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		d.mu.Lock()
		result = j.result
		d.mu.Unlock()
		if result == nil {
			return 0, ErrNotLeading // it ended without a result here: not ours to answer
		}
		return terminalCancel(jobID, result)
	}
	d.mu.Lock()
	first := j.cancellation == nil
	d.mu.Unlock()
	if first {
		// The store keeps the first request's record, which may be
		// another concurrent request's: the job shows the store's.
		if d.storedCancellation(ld, j) == nil {
			d.mu.Lock()
			ld.cancellationLocked(j, record)
			d.mu.Unlock()
		}
	}
	st := r.Cancel(ctx)
	if err := d.stillLeading(ld); err != nil {
		return 0, err
	}
	if jobstatus.IsGloballyTerminal(st) {
		// Globally terminal only once the job's result is durable; until
		// the Dispatcher wrote it, the job is still being canceled. A
		// JobMaster that reached FINISHED or FAILED before the cancel does
		// not decide either: the store refuses that result now that the
		// request is recorded, and the job ends CANCELED (finish).
		d.mu.Lock()
		result := j.result
		d.mu.Unlock()
		st = jobplanev1.JobStatus_JOB_STATUS_CANCELLING
		if result != nil {
			st = result.GetStatus()
		}
	}
	return st, nil
}

// terminalCancel answers the cancellation of a job that has a result.
func terminalCancel(jobID string, result *jobplanev1.JobResult) (jobplanev1.JobStatus, error) {
	if result.GetStatus() == jobstatus.Canceled {
		return jobstatus.Canceled, nil
	}
	return 0, &TerminalError{JobID: jobID, Status: result.GetStatus()}
}

// ErrCancelNotRecorded: the HA store did not confirm a cancel request;
// nothing was done for it, and the client retries.
var ErrCancelNotRecorded = errors.New("dispatcher: the cancel request could not be recorded in the HA store")

// requestCancel records the job's cancel request in the store, within the
// persist timeout.
func (d *Dispatcher) requestCancel(ld *leadership, jobID string, record *jobplanev1.Cancellation) error {
	ctx, cancel := context.WithTimeout(ld.ctx, d.cfg.PersistTimeout)
	defer cancel()
	err := d.cfg.Store.RequestCancel(ctx, ld.l.Fence(), jobID, record)
	switch {
	case err == nil, errors.Is(err, hastore.ErrPlanNotFound), errors.Is(err, hastore.ErrJobTerminal):
		return err
	case errors.Is(err, hastore.ErrStaleToken):
		d.log.Warn("the HA store refused a cancel request as stale; stepping down", "job", jobID)
		go d.stepDown(ld)
		return ErrNotLeading
	case d.stillLeading(ld) != nil:
		return ErrNotLeading
	}
	d.log.Warn("recording a cancel request failed", "job", jobID, "err", err)
	return fmt.Errorf("%w: %v", ErrCancelNotRecorded, err)
}

// Details returns a job's details; with full, the subtasks of page and
// the offset of the next page (-1 after the last). A running job's come
// from its JobMaster; an ended job's from the final details its
// JobMaster left, while they are kept (ended.go); otherwise only the
// summary and the exception history are known.
func (d *Dispatcher) Details(ctx context.Context, jobID, runID string, full bool, page jobmaster.Page) (*jobplanev1.JobDetails, int, error) {
	ld, j, err := d.findRun(ctx, jobID, runID)
	if err != nil {
		return nil, -1, err
	}
	var det *jobplanev1.JobDetails
	next := -1
	d.mu.Lock()
	r := j.runner
	d.mu.Unlock()
	if r != nil {
		if jm := r.JobMaster(); jm != nil {
			if got, n, err := jm.Details(ctx, full, page); err == nil {
				got.Summary.SubmitTime, got.Summary.SubmittedBy, got.Summary.RunId = timestamppb.New(j.submitted()), j.owner, j.runID
				d.mu.Lock()
				got.Summary.Cancellation = j.cancellation
				ended := j.result
				d.mu.Unlock()
				if ended != nil {
					// Once the result is written, its status is the job's,
					// whatever its last JobMaster's state said (CANCELLING,
					// say, when the job was canceled before it ran).
					got.Summary.Status, got.Summary.StatusTime, got.Summary.EndTime = ended.GetStatus(), ended.GetEndTime(), ended.GetEndTime()
				}
				if jobstatus.IsGloballyTerminal(got.GetSummary().GetStatus()) {
					// The JobMaster ended the job, but the job's status is
					// the store's answer to its result (a cancel recorded
					// meanwhile turns FINISHED into CANCELED): until then
					// the status published by the Dispatcher is served.
					// Once the result is written, its status is the job's,
					// whatever the Dispatcher published last.
					d.mu.Lock()
					latest, result := j.latest(), j.result
					d.mu.Unlock()
					got.Summary.Status, got.Summary.StatusTime, got.Summary.EndTime = latest.GetStatus(), latest.GetStatusTime(), latest.GetEndTime()
					if result != nil && result.GetStatus() != got.GetSummary().GetStatus() {
						got.Summary.Status, got.Summary.EndTime = result.GetStatus(), result.GetEndTime()
					}
				}
				det, next = got, n
			}
		}
	}
	if det == nil {
		// No JobMaster answered: the job waits for one, or it ended. An
		// ended job's final details are served from when its JobMaster
		// left them, so that a client paging through them sees no gap;
		// its status turns terminal once its result is recorded.
		d.mu.Lock()
		d.expireDetailsLocked(ld)
		summary, result, final := j.latest(), j.result, j.final
		d.mu.Unlock()
		switch {
		case final != nil && result != nil:
			det, next = final.Details(summary, result.GetExceptionHistory(), full, page)
		case final != nil:
			det, next = final.Details(summary, final.Exceptions(), full, page)
		default:
			det = &jobplanev1.JobDetails{Summary: summary, ExceptionHistory: result.GetExceptionHistory()}
		}
	}
	if err := d.stillLeading(ld); err != nil {
		return nil, -1, err
	}
	return det, next, nil
}

// Result returns a job's result; with wait, it waits for the job to end.
func (d *Dispatcher) Result(ctx context.Context, jobID, runID string, wait bool) (*jobplanev1.JobResult, error) {
	ld, j, err := d.findRun(ctx, jobID, runID)
	if err != nil {
		return nil, err
	}
	if wait {
		d.mu.Lock()
		done := j.doneLocked()
		d.mu.Unlock()
		select {
		case <-done:
		case <-ld.ctx.Done():
			return nil, ErrNotLeading
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if err := d.stillLeading(ld); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if j.result == nil {
		return nil, &NotTerminalError{JobID: jobID, Status: j.status()}
	}
	return j.result, nil
}

// WatchEvent is one message of a watch: a status (Summary) with the token
// that resumes after it, or a heartbeat (Summary nil).
type WatchEvent struct {
	Summary *jobplanev1.JobSummary
	// ResumeToken continues a watch right after this message.
	ResumeToken string
	// Coalesced marks a first message that does not continue exactly from
	// the resume token the watch was asked for.
	Coalesced bool
}

// ErrStreamBehind: a watch fell so far behind its job's changes that the
// ones it missed are no longer kept.
var ErrStreamBehind = errors.New("dispatcher: the watch fell behind the job's changes")

// ErrResumeTokenOfAnotherJob: a watch was asked to resume from another
// job's token.
var ErrResumeTokenOfAnotherJob = errors.New("dispatcher: the resume token is another job's")

// resumeToken names the message at index i of j's history under the
// leadership ld: history is kept per leadership, so a token from another
// one cannot be resumed exactly.
func resumeToken(ld *leadership, j *job, i int) string {
	t := ld.l.Token()
	return fmt.Sprintf("%s.%d.%d.%s", t.SessionID, t.Epoch, i, j.id)
}

// parseResumeToken returns the history index a token names under ld, and
// whether it names one there; a token of another job is an error.
func parseResumeToken(ld *leadership, j *job, token string) (int, bool, error) {
	parts := strings.SplitN(token, ".", 4)
	if len(parts) != 4 {
		return 0, false, nil
	}
	if parts[3] != j.id {
		return 0, false, ErrResumeTokenOfAnotherJob
	}
	t := ld.l.Token()
	epoch, err1 := strconv.ParseUint(parts[1], 10, 64)
	i, err2 := strconv.Atoi(parts[2])
	if err1 != nil || err2 != nil || parts[0] != t.SessionID || epoch != t.Epoch || i < 0 {
		return 0, false, nil
	}
	return i, true, nil
}

// Watch calls fn with the job's current summary and then with every
// change, in order, until the job is globally terminal (nil), ctx ends
// (ctx's error) or leadership is lost (ErrNotLeading). A change is a new
// status, or a restart count grown under the same status (history.go:
// restarts that follow each other before fn is called again may come as
// one). Every heartbeat without a change, fn is called with an event
// without a summary. With a resume token of this leadership, the watch
// continues right after the message it names; with any other, it starts
// with the current summary, marked coalesced.
func (d *Dispatcher) Watch(ctx context.Context, jobID, runID, resume string, heartbeat time.Duration, fn func(WatchEvent) error) error {
	ld, j, err := d.findRun(ctx, jobID, runID)
	if err != nil {
		return err
	}
	d.mu.Lock()
	at, exact, err := parseResumeToken(ld, j, resume)
	var (
		pending []WatchEvent
		last    *jobplanev1.JobSummary // the summary the watcher has seen last
		next    int
		r       = j.runner
	)
	h := j.hist() // built once: a job that has not changed keeps none
	if from, kept := h.at(at); exact && kept {
		// Continue after the message the token names.
		last = from
		pending = d.eventsLocked(ld, j, at+1)
	} else {
		exact = false
		pending = []WatchEvent{{Summary: h.latest(), ResumeToken: resumeToken(ld, j, h.end()-1), Coalesced: resume != ""}}
	}
	next = h.end()
	d.mu.Unlock()
	if err != nil {
		return err
	}
	if exact && jobstatus.IsGloballyTerminal(last.GetStatus()) {
		return nil // nothing comes after a terminal status
	}
	if !exact && r != nil {
		// The first message is the current state: the JobMaster's own
		// summary while it runs the job (the recorded one dates from the
		// last change, with the task counts of then), else the recorded
		// one. It stands for the latest recorded change, whose token it
		// takes, only if it shows that change's status and restarts.
		if jm := r.JobMaster(); jm != nil {
			// A globally terminal status is shown only once its result is
			// durable, as recorded by finish.
			if s, err := jm.Summary(ctx); err == nil && !jobstatus.IsGloballyTerminal(s.GetStatus()) {
				s.SubmitTime = timestamppb.New(j.submitted())
				d.mu.Lock()
				if h := j.hist(); h.latest().GetStatus() == s.GetStatus() && h.latest().GetRestartCount() == s.GetRestartCount() {
					next = h.end()
					pending[0].Summary, pending[0].ResumeToken = s, resumeToken(ld, j, next-1)
				}
				d.mu.Unlock()
			}
		}
	}
	for {
		for _, ev := range pending {
			if last != nil && ev.Summary.GetStatus() == last.GetStatus() && ev.Summary.GetRestartCount() == last.GetRestartCount() {
				continue // the JobMaster's summary showed this change already
			}
			if err := d.stillLeading(ld); err != nil {
				return err
			}
			if err := fn(ev); err != nil {
				return err
			}
			last = ev.Summary
			if jobstatus.IsGloballyTerminal(last.GetStatus()) {
				return nil
			}
		}
		d.mu.Lock()
		h := j.hist()
		if next < h.first() {
			// The job changed faster than this stream was read: what it
			// missed is gone. The client resumes, and starts over.
			d.mu.Unlock()
			return ErrStreamBehind
		}
		pending = d.eventsLocked(ld, j, next)
		next = h.end()
		changed := j.changedLocked()
		d.mu.Unlock()
		if len(pending) > 0 {
			continue
		}
		select {
		case <-changed:
		case <-time.After(heartbeat):
			if err := d.stillLeading(ld); err != nil {
				return err
			}
			if err := fn(WatchEvent{}); err != nil {
				return err
			}
		case <-ld.ctx.Done():
			return ErrNotLeading
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// eventsLocked returns the events of j's changes kept from number i on,
// each with the token that resumes after it; d.mu must be held.
func (d *Dispatcher) eventsLocked(ld *leadership, j *job, i int) []WatchEvent {
	var out []WatchEvent
	for _, c := range j.hist().since(i) {
		out = append(out, WatchEvent{Summary: c.summary, ResumeToken: resumeToken(ld, j, c.seq)})
	}
	return out
}

// ClientHeartbeat records that an attached job's client is alive and
// returns the next deadline (zero for a detached job).
func (d *Dispatcher) ClientHeartbeat(ctx context.Context, jobID string) (time.Time, error) {
	ld, j, err := d.find(ctx, jobID)
	if err != nil {
		return time.Time{}, err
	}
	if err := d.stillLeading(ld); err != nil {
		return time.Time{}, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if j.heartbeat == nil || j.result != nil {
		return time.Time{}, nil
	}
	j.heartbeat.Reset(j.heartbeatTimeout)
	return time.Now().Add(j.heartbeatTimeout), nil
}

// List returns the summaries of up to size accepted jobs, newest
// submission first (then by job id), strictly after the cursor after
// (from the newest if nil), filtered by status when statuses is not
// empty; and the cursor of the last one listed if more follow (nil after
// the last page). It costs O(size + log n) for each status asked for,
// whatever the number n of jobs, and copies no summary beyond the page.
// Jobs submitted while a client pages are newer than its cursor, so they
// neither repeat nor hide a job on later pages.
func (d *Dispatcher) List(ctx context.Context, statuses []jobplanev1.JobStatus, after *Cursor, size int) ([]*jobplanev1.JobSummary, *Cursor, error) {
	ld, err := d.current(ctx)
	if err != nil {
		return nil, nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	jobs, more := ld.index.page(statuses, after, size)
	out := make([]*jobplanev1.JobSummary, len(jobs))
	for i, j := range jobs {
		out[i] = j.latest()
	}
	var next *Cursor
	if more && len(jobs) > 0 {
		last := jobs[len(jobs)-1]
		next = &Cursor{SubmitTime: last.submitted(), JobID: last.id}
	}
	if d.lead != ld || !ld.l.Valid() {
		return nil, nil, ErrNotLeading
	}
	return out, next, nil
}

// candidatesTimeout bounds the count of the standbys in an overview.
const candidatesTimeout = 200 * time.Millisecond

// Overview counts jobs by status, from the counters the index maintains,
// and reports the leader's TaskExecutors and slots.
func (d *Dispatcher) Overview(ctx context.Context) (*jobplanev1.GetClusterOverviewResponse, error) {
	ld, err := d.current(ctx)
	if err != nil {
		return nil, err
	}
	resp := &jobplanev1.GetClusterOverviewResponse{}
	if cc, ok := d.cfg.Store.(hastore.CandidateCounter); ok {
		// The other campaigns of the election are the standbys; a store
		// that does not answer at once leaves their number unknown (the
		// overview is what clients and health checks ask first: it never
		// waits on the store).
		cctx, cancel := context.WithTimeout(ctx, candidatesTimeout)
		n, err := cc.Candidates(cctx, election.JobManager)
		cancel()
		if err == nil {
			resp.StandbyCount = proto.Int32(int32(max(n-1, 0)))
		}
	}
	if d.cfg.TaskExecutors != nil {
		te, total, free := d.cfg.TaskExecutors.SlotOverview()
		resp.TaskExecutorCount, resp.SlotCount, resp.FreeSlotCount = int32(te), int32(total), int32(free)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	resp.FinishedJobCount = int32(ld.index.count(jobstatus.Finished))
	resp.CanceledJobCount = int32(ld.index.count(jobstatus.Canceled))
	resp.FailedJobCount = int32(ld.index.count(jobstatus.Failed))
	// Every other status, suspended and initializing included, counts as
	// running, as it always has.
	resp.RunningJobCount = int32(ld.index.len()) - resp.FinishedJobCount - resp.CanceledJobCount - resp.FailedJobCount
	resp.Limits = d.limits()
	tok := ld.l.Token()
	resp.Leader = &jobplanev1.LeaderInfo{Election: election.JobManager, Address: d.cfg.Address, Token: &jobplanev1.FencingToken{SessionId: tok.SessionID, Epoch: tok.Epoch}}
	if d.lead != ld || !ld.l.Valid() {
		return nil, ErrNotLeading
	}
	return resp, nil
}

// JobCounts returns the number of jobs the leading Dispatcher knows in
// each status (from the counters its index maintains); nil while it does
// not lead.
func (d *Dispatcher) JobCounts() map[jobplanev1.JobStatus]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	ld := d.lead
	if ld == nil {
		return nil
	}
	out := map[jobplanev1.JobStatus]int{}
	for st := range jobplanev1.JobStatus_name {
		if n := ld.index.count(jobplanev1.JobStatus(st)); n > 0 {
			out[jobplanev1.JobStatus(st)] = n
		}
	}
	return out
}

// Page sizes the Dispatcher honours at most: ListJobs' jobs, and the
// subtasks of GetJob's full view.
const (
	maxListPageSize    = 1000
	maxSubtaskPageSize = 10_000
)

// limits are the limits the Dispatcher enforces, as GetClusterOverview
// reports them.
func (d *Dispatcher) limits() *jobplanev1.ServerLimits {
	l := d.cfg.Limits.WithDefaults()
	out := &jobplanev1.ServerLimits{
		MaxRequestBytes: d.cfg.MaxRequestBytes, MaxResponseBytes: d.cfg.MaxResponseBytes,
		MaxGraphBytes: int64(l.MaxEncodedBytes), MaxVertices: int32(l.MaxVertices), MaxSubtasks: int32(l.MaxSubtasks),
		MaxListPageSize: maxListPageSize, MaxSubtaskPageSize: maxSubtaskPageSize,
		// The JobMasters enforce the reference limits of task results.
		MaxTaskValueBytes: taskvalue.DefaultMaxTaskValueBytes, MaxResultValueBytes: taskvalue.DefaultMaxResultValueBytes,
		MaxAccumulators: taskvalue.DefaultMaxAccumulators,
	}
	if _, err := d.checkpoints(); err == nil {
		out.MaxInlineStateBytes, out.MaxCheckpointBytes = jobmaster.DefaultMaxInlineStateBytes, jobmaster.DefaultMaxCheckpointBytes
	}
	return out
}

// TaskExecutors lists up to n registered TaskExecutors after the id
// `after`, and the id to continue after ("" on the last page).
func (d *Dispatcher) TaskExecutors(ctx context.Context, after string, n int) ([]*jobplanev1.TaskExecutorInfo, string, error) {
	ld, err := d.current(ctx)
	if err != nil {
		return nil, "", err
	}
	if d.cfg.TaskExecutors == nil {
		return nil, "", nil
	}
	tes, more := d.cfg.TaskExecutors.ListTaskExecutors(after, n)
	if err := d.stillLeading(ld); err != nil {
		return nil, "", err
	}
	next := ""
	if more && len(tes) > 0 {
		next = tes[len(tes)-1].GetTaskExecutorId()
	}
	return tes, next, nil
}

// Queued counts the jobs waiting for a seat in the admission window; 0
// while not leading.
func (d *Dispatcher) Queued() int {
	d.mu.Lock()
	ld := d.lead
	d.mu.Unlock()
	if ld == nil {
		return 0
	}
	return ld.gate.Waiting()
}

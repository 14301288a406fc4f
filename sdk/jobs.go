package sdk

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"iter"
	"math"
	"time"

	"connectrpc.com/connect"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
	"github.com/jobplane/jobplane/sdk/jobgraph"
)

// NewJobID returns a new random job id: 32 hexadecimal digits (128
// bits), as Flink's job ids.
func NewJobID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

// IsGloballyTerminal reports whether a job in status s has ended for
// good: FINISHED, FAILED or CANCELED. A SUSPENDED job has not: another
// JobManager takes it over.
func IsGloballyTerminal(s jobplanev1.JobStatus) bool {
	switch s {
	case jobplanev1.JobStatus_JOB_STATUS_FINISHED, jobplanev1.JobStatus_JOB_STATUS_FAILED, jobplanev1.JobStatus_JOB_STATUS_CANCELED:
		return true
	}
	return false
}

// A SubmitOption configures Submit.
type SubmitOption func(*submitOptions)

type submitOptions struct {
	jobID          string
	allowDuplicate bool
}

// WithJobID submits the job under id (1 to 64 characters from
// [A-Za-z0-9_-]). Submitting the same id and plan again is safe: it
// answers the existing job. Default: a new id from NewJobID.
func WithJobID(id string) SubmitOption { return func(o *submitOptions) { o.jobID = id } }

// WithIDReuse lets the submission start a new run of a job id whose job
// ended and whose result the cluster keeps
// (JOB_ID_REUSE_POLICY_ALLOW_DUPLICATE): the result is removed and the
// job runs again, under a new run id. While the old job's cleanup is not
// done, Submit fails with ErrCleanupPending; try again. Default: the
// kept result answers and the job never runs again. A retried call may
// start another run if the one it started ended meanwhile.
func WithIDReuse() SubmitOption { return func(o *submitOptions) { o.allowDuplicate = true } }

// Submitted is the answer to Submit.
type Submitted struct {
	// JobID is the job's id.
	JobID string
	// Created is true when the cluster created the job on this call's
	// answered attempt. It is false when the job already existed: from an
	// earlier Submit with the same id and plan, or from an earlier
	// attempt of this call whose answer was lost and which was retried.
	Created bool
	// Status is the job's status when the call returned.
	Status jobplanev1.JobStatus
	// RunID is the id of the run the answer is about: the new one's, or
	// the existing job's (empty from a server before contract 1.2).
	RunID string
}

// localLimits are the limits of the checks Submit makes before sending:
// the contract's rules, but none of the bounds a cluster configures (it
// checks those itself).
var localLimits = jobgraph.Limits{MaxVertices: math.MaxInt, MaxSubtasks: math.MaxInt, MaxEncodedBytes: math.MaxInt}

// Validate checks g against the contract's rules, with the server's own
// checks and words, and returns an *InvalidJobError listing every broken
// rule, or nil. Bounds that a cluster configures (vertices, subtasks,
// size) are left to the cluster.
func Validate(g *jobplanev1.JobGraph) error {
	_, err := jobgraph.Prepare(g, nil, localLimits)
	var jerr *jobgraph.Error
	if errors.As(err, &jerr) {
		out := &InvalidJobError{}
		for _, v := range jerr.Violations {
			out.Violations = append(out.Violations, Violation{Field: v.Field, Description: v.Description})
		}
		return out
	}
	return err
}

// Submit submits the job g and returns once the cluster has persisted
// it. The graph is checked first (see Validate); an invalid one is never
// sent. The job id is WithJobID's or a new one; every retry sends the
// same id, so the job is created at most once however many attempts the
// call makes.
func (c *Client) Submit(ctx context.Context, g *jobplanev1.JobGraph, opts ...SubmitOption) (*Submitted, error) {
	var o submitOptions
	for _, opt := range opts {
		opt(&o)
	}
	if o.jobID == "" {
		o.jobID = NewJobID()
	}
	if !jobgraph.ValidJobID(o.jobID) {
		return nil, &InvalidJobError{Violations: []Violation{{Field: "job_id", Description: jobgraph.JobIDRule}}}
	}
	if err := Validate(g); err != nil {
		return nil, err
	}
	req := &jobplanev1.SubmitJobRequest{JobId: o.jobID, JobGraph: g}
	if o.allowDuplicate {
		req.IdReuse = jobplanev1.JobIdReusePolicy_JOB_ID_REUSE_POLICY_ALLOW_DUPLICATE
	}
	resp, err := call(ctx, c, true, func(ctx context.Context, d jobplanev1connect.DispatcherServiceClient) (*jobplanev1.SubmitJobResponse, error) {
		r, err := d.SubmitJob(ctx, req)
		if err != nil {
			return nil, err
		}
		return r, nil
	})
	if err != nil {
		var dup *DuplicateJobError
		if errors.As(err, &dup) && dup.JobID == "" {
			dup.JobID = o.jobID
		}
		return nil, err
	}
	return &Submitted{JobID: resp.GetJobId(), Created: resp.GetCreated(), Status: resp.GetStatus(), RunID: resp.GetRunId()}, nil
}

// waitChunk bounds one GetJobResult call of Wait; Wait calls again while
// its context lasts.
const waitChunk = 5 * time.Minute

// Wait waits for the job to end for good and returns its result. It takes
// as long as the job does, following the leader across changes; bound it
// with ctx. While it waits it sends the job's client heartbeats (see
// Attach). A job that ends FAILED or CANCELED is not an error: look at
// the result's status.
func (c *Client) Wait(ctx context.Context, jobID string) (*jobplanev1.JobResult, error) {
	defer c.keepAttached(ctx, jobID)()
	req := &jobplanev1.GetJobResultRequest{JobId: jobID, Wait: true}
	for {
		res, err := call(ctx, c, false, func(ctx context.Context, d jobplanev1connect.DispatcherServiceClient) (*jobplanev1.JobResult, error) {
			cctx, cancel := context.WithTimeout(ctx, waitChunk)
			defer cancel()
			r, err := d.GetJobResult(cctx, req)
			if err != nil {
				if cctx.Err() != nil && ctx.Err() == nil {
					return nil, nil // the chunk ended: wait again
				}
				return nil, err
			}
			return r.GetResult(), nil
		})
		if err != nil || res != nil {
			return res, err
		}
	}
}

// Result returns the result of a job that has ended for good, as the
// cluster keeps it in its HA store (after a restart or a change of
// leader too): its status and failure, and what its tasks returned
// (JobResult.values, one per subtask whose finished attempt returned a
// value, and JobResult.accumulators, each summed over one finished
// attempt per subtask). It does not wait: a job that has not ended yet
// is ErrJobNotTerminal (Wait waits); an unknown one, or one whose result
// was deleted, ErrJobNotFound.
func (c *Client) Result(ctx context.Context, jobID string) (*jobplanev1.JobResult, error) {
	req := &jobplanev1.GetJobResultRequest{JobId: jobID}
	return call(ctx, c, false, func(ctx context.Context, d jobplanev1connect.DispatcherServiceClient) (*jobplanev1.JobResult, error) {
		r, err := d.GetJobResult(ctx, req)
		if err != nil {
			return nil, err
		}
		return r.GetResult(), nil
	})
}

// Execute submits the job g and waits for its result: Submit, then Wait.
func (c *Client) Execute(ctx context.Context, g *jobplanev1.JobGraph, opts ...SubmitOption) (*jobplanev1.JobResult, error) {
	s, err := c.Submit(ctx, g, opts...)
	if err != nil {
		return nil, err
	}
	return c.Wait(ctx, s.JobID)
}

// A CancelOption configures Cancel.
type CancelOption func(*jobplanev1.CancelJobRequest)

// WithReason records why the job is canceled with the cancel request (at
// most 1,024 bytes); the job's summary and result show the first
// recorded request's. Default: none.
func WithReason(reason string) CancelOption {
	return func(r *jobplanev1.CancelJobRequest) { r.Reason = reason }
}

// WithRequestID gives the cancel request an id of the caller's (at most
// 128 bytes), recorded with it, the same for every retry of the call.
// Default: none. (The SDK sends none of its own: a server before contract
// 1.2 refuses a request with fields it does not know, so each of these
// options needs a 1.2 server.)
func WithRequestID(id string) CancelOption {
	return func(r *jobplanev1.CancelJobRequest) { r.RequestId = id }
}

// WithRun cancels only the run runID of the job id (Submitted.RunID):
// if the id's current job is another run, Cancel fails with
// ErrJobNotFound and nothing is canceled. Default: whichever run is
// current.
func WithRun(runID string) CancelOption {
	return func(r *jobplanev1.CancelJobRequest) { r.RunId = runID }
}

// Cancel cancels the job and returns its status then: CANCELLING, or
// CANCELED once it has ended. The cancellation is durable once Cancel
// returns. Canceling a job that is CANCELLING or CANCELED again is no
// error, and changes nothing recorded; one that FINISHED or FAILED is
// ErrJobTerminal.
func (c *Client) Cancel(ctx context.Context, jobID string, opts ...CancelOption) (jobplanev1.JobStatus, error) {
	req := &jobplanev1.CancelJobRequest{JobId: jobID}
	for _, opt := range opts {
		opt(req)
	}
	return call(ctx, c, true, func(ctx context.Context, d jobplanev1connect.DispatcherServiceClient) (jobplanev1.JobStatus, error) {
		r, err := d.CancelJob(ctx, req)
		if err != nil {
			return 0, err
		}
		return r.GetStatus(), nil
	})
}

// Purge removes the kept result of a job that ended, now rather than when
// the cluster's retention would: the job id is then unknown
// (ErrJobNotFound) and free for a new run. With a non-empty runID, only
// that run's (Submitted.RunID). A job that has not ended is
// ErrJobNotTerminal; one whose cleanup is not done yet
// ErrCleanupPending (try again); an unknown one, or another run,
// ErrJobNotFound, also when a retry follows a purge whose answer was
// lost.
func (c *Client) Purge(ctx context.Context, jobID, runID string) error {
	req := &jobplanev1.PurgeJobRequest{JobId: jobID, RunId: runID}
	_, err := call(ctx, c, true, func(ctx context.Context, d jobplanev1connect.DispatcherServiceClient) (*jobplanev1.PurgeJobResponse, error) {
		return d.PurgeJob(ctx, req)
	})
	return err
}

// A GetOption configures Get.
type GetOption func(*getOptions)

type getOptions struct {
	summary  bool
	pageSize int32
}

// WithSubtaskPageSize sets how many subtasks each of Get's calls asks
// for. Default: the server's (1,000 in the reference server).
func WithSubtaskPageSize(n int) GetOption { return func(o *getOptions) { o.pageSize = int32(n) } }

// WithSummaryView makes Get return the summary and per-vertex counts,
// without one entry per subtask (JOB_VIEW_SUMMARY): one call, whatever
// the job's size.
func WithSummaryView() GetOption { return func(o *getOptions) { o.summary = true } }

// Get returns the job's details: by default the full view, every subtask
// of every vertex (the pages of JOB_VIEW_FULL read and merged).
func (c *Client) Get(ctx context.Context, jobID string, opts ...GetOption) (*jobplanev1.JobDetails, error) {
	var o getOptions
	for _, opt := range opts {
		opt(&o)
	}
	view := jobplanev1.JobView_JOB_VIEW_FULL
	if o.summary {
		view = jobplanev1.JobView_JOB_VIEW_SUMMARY
	}
	var out *jobplanev1.JobDetails
	index := map[string]*jobplanev1.VertexDetails{}
	token := ""
	for {
		req := &jobplanev1.GetJobRequest{JobId: jobID, View: view, PageToken: token, PageSize: o.pageSize}
		resp, err := call(ctx, c, true, func(ctx context.Context, d jobplanev1connect.DispatcherServiceClient) (*jobplanev1.GetJobResponse, error) {
			r, err := d.GetJob(ctx, req)
			if err != nil {
				return nil, err
			}
			return r, nil
		})
		if err != nil {
			return nil, err
		}
		page := resp.GetJob()
		if out == nil {
			out = page
			for _, v := range out.GetVertices() {
				index[v.GetVertexId()] = v
			}
		} else {
			// Later pages: the summary as of now, and more subtasks.
			out.Summary = page.GetSummary()
			for _, v := range page.GetVertices() {
				if have, ok := index[v.GetVertexId()]; ok {
					have.Subtasks = append(have.Subtasks, v.GetSubtasks()...)
					have.State, have.TaskCounts = v.GetState(), v.GetTaskCounts()
					continue
				}
				index[v.GetVertexId()] = v
				out.Vertices = append(out.Vertices, v)
			}
		}
		next := resp.GetNextPageToken()
		if next == "" {
			return out, nil
		}
		if next == token {
			return nil, fmt.Errorf("sdk: GetJob of %s answered the same page token twice", jobID)
		}
		token = next
	}
}

// A ListOption configures List.
type ListOption func(*listOptions)

type listOptions struct {
	statuses []jobplanev1.JobStatus
	pageSize int32
}

// WithStatuses lists only the jobs in one of these statuses. Default: all.
func WithStatuses(s ...jobplanev1.JobStatus) ListOption {
	return func(o *listOptions) { o.statuses = append(o.statuses, s...) }
}

// WithPageSize sets how many jobs each call asks for. Default: the
// server's (100 in the reference server).
func WithPageSize(n int) ListOption { return func(o *listOptions) { o.pageSize = int32(n) } }

// List lists the known jobs, newest submission first, reading pages as
// the loop goes. An error ends the sequence:
//
//	for job, err := range c.List(ctx) {
//		if err != nil { return err }
//		fmt.Println(job.GetJobId(), job.GetStatus())
//	}
func (c *Client) List(ctx context.Context, opts ...ListOption) iter.Seq2[*jobplanev1.JobSummary, error] {
	var o listOptions
	for _, opt := range opts {
		opt(&o)
	}
	return pages(ctx, c, func(ctx context.Context, d jobplanev1connect.DispatcherServiceClient, token string) ([]*jobplanev1.JobSummary, string, error) {
		r, err := d.ListJobs(ctx, &jobplanev1.ListJobsRequest{PageSize: o.pageSize, PageToken: token, Statuses: o.statuses})
		if err != nil {
			return nil, "", err
		}
		return r.GetJobs(), r.GetNextPageToken(), nil
	})
}

// TaskExecutors lists the TaskExecutors registered with the cluster, with
// their slots, in id order.
func (c *Client) TaskExecutors(ctx context.Context) iter.Seq2[*jobplanev1.TaskExecutorInfo, error] {
	return pages(ctx, c, func(ctx context.Context, d jobplanev1connect.DispatcherServiceClient, token string) ([]*jobplanev1.TaskExecutorInfo, string, error) {
		r, err := d.ListTaskExecutors(ctx, &jobplanev1.ListTaskExecutorsRequest{PageToken: token})
		if err != nil {
			return nil, "", err
		}
		return r.GetTaskExecutors(), r.GetNextPageToken(), nil
	})
}

// pages iterates over the items of a paged call.
func pages[T any](ctx context.Context, c *Client, page func(ctx context.Context, d jobplanev1connect.DispatcherServiceClient, token string) ([]T, string, error)) iter.Seq2[T, error] {
	type answer struct {
		items []T
		next  string
	}
	return func(yield func(T, error) bool) {
		token := ""
		for {
			a, err := call(ctx, c, true, func(ctx context.Context, d jobplanev1connect.DispatcherServiceClient) (answer, error) {
				items, next, err := page(ctx, d, token)
				return answer{items, next}, err
			})
			if err != nil {
				var zero T
				yield(zero, err)
				return
			}
			for _, it := range a.items {
				if !yield(it, nil) {
					return
				}
			}
			if a.next == "" {
				return
			}
			token = a.next
		}
	}
}

// Cluster returns the cluster's overview: the leader, TaskExecutors,
// slots, and jobs by status.
func (c *Client) Cluster(ctx context.Context) (*jobplanev1.GetClusterOverviewResponse, error) {
	return call(ctx, c, true, func(ctx context.Context, d jobplanev1connect.DispatcherServiceClient) (*jobplanev1.GetClusterOverviewResponse, error) {
		r, err := d.GetClusterOverview(ctx, &jobplanev1.GetClusterOverviewRequest{})
		if err != nil {
			return nil, err
		}
		return r, nil
	})
}

// Watch streams the job's status changes: first its current summary,
// then one summary per change, in order, ending after a globally terminal
// status (see IsGloballyTerminal), which is never skipped. A restart is a
// change too: a server of contract 1.2 sends a summary whenever the
// restart count grows, also while the status stays RUNNING (restarts
// faster than the loop reads may come as one, counting them all). When the
// stream breaks (a dropped connection, a change of leader) Watch
// reconnects where it left off, with the last resume token: nothing is
// repeated, and nothing is skipped while the same leader can resume.
// When it cannot (the leader changed, or the stream fell more than the
// server keeps behind), the stream starts again from the current summary
// (the contract's "coalesced" case): changes in between are skipped, and
// that summary is not yielded if its status and restart count are those
// yielded last. An error ends the sequence; breaking out of the loop
// closes the stream. While the loop runs, the job's client heartbeats
// are sent (see Attach).
func (c *Client) Watch(ctx context.Context, jobID string) iter.Seq2[*jobplanev1.JobSummary, error] {
	return func(yield func(*jobplanev1.JobSummary, error) bool) {
		defer c.keepAttached(ctx, jobID)()
		token := ""
		var last *jobplanev1.JobSummary
		r := c.retrier()
		for {
			url := c.target()
			ended, err := c.watchOnce(ctx, url, jobID, &token, &last, func(s *jobplanev1.JobSummary) bool {
				r.progress()
				return yield(s, nil)
			})
			if ended {
				return
			}
			if err := r.next(ctx, url, err); err != nil {
				yield(nil, err)
				return
			}
		}
	}
}

// watchOnce runs one WatchJob stream at url, from *token, and hands every
// summary to yield. ended is true when the sequence is over: a globally
// terminal summary was handed on, or yield asked to stop.
func (c *Client) watchOnce(ctx context.Context, url, jobID string, token *string, last **jobplanev1.JobSummary, yield func(*jobplanev1.JobSummary) bool) (ended bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.Dispatcher(url).WatchJob(ctx, &jobplanev1.WatchJobRequest{JobId: jobID, ResumeToken: *token})
	if err != nil {
		return false, err
	}
	defer stream.Close()
	for stream.Receive() {
		msg := stream.Msg()
		job := msg.GetJob()
		if job == nil {
			continue // a heartbeat
		}
		c.answered(url)
		*token = msg.GetResumeToken()
		if msg.GetCoalesced() && *last != nil && job.GetStatus() == (*last).GetStatus() && job.GetRestartCount() == (*last).GetRestartCount() {
			continue // a fresh start that repeats what was yielded last
		}
		*last = job
		if !yield(job) || IsGloballyTerminal(job.GetStatus()) {
			return true, nil
		}
	}
	return false, stream.Err()
}

// Attach sends the job's client heartbeats (ReportClientHeartbeat) until
// the returned function is called or ctx ends. A job whose JobConfig sets
// a client_heartbeat_timeout (an attached job) is canceled by the cluster
// when no heartbeat arrives for that long: Attach keeps it alive while its
// client does, and lets it be canceled once the client is gone. For a
// detached job it makes one call and stops. Wait and Watch attach by
// themselves while they run.
func (c *Client) Attach(ctx context.Context, jobID string) (detach func()) {
	return c.keepAttached(ctx, jobID)
}

// keepAttached runs the heartbeats of Attach in a goroutine. It keeps
// sending until stopped, ctx ends, or the cluster says the job is
// detached or unknown; a failed heartbeat is sent again soon (to the
// leader it names, or to the next URL), and each attempt is bounded by a
// third of the job's timeout, so that a hung server does not outlast it.
func (c *Client) keepAttached(ctx context.Context, jobID string) func() {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		req := &jobplanev1.ReportClientHeartbeatRequest{JobId: jobID}
		interval := time.Duration(0) // a third of the job's timeout, once known
		for {
			limit := c.opts.callTimeout
			if interval > 0 && (limit <= 0 || interval < limit) {
				limit = interval
			}
			url := c.target()
			actx, acancel := context.WithTimeout(ctx, cmp.Or(limit, DefaultCallTimeout))
			resp, err := c.Dispatcher(url).ReportClientHeartbeat(actx, req)
			acancel()
			pause := interval
			switch {
			case err == nil:
				c.answered(url)
				timeout := resp.GetTimeout().AsDuration()
				if timeout <= 0 {
					return // a detached job
				}
				interval = timeout / 3
				pause = interval
			case ctx.Err() != nil:
				return
			case connect.CodeOf(err) == connect.CodeNotFound, connect.CodeOf(err) == connect.CodeInvalidArgument:
				return // the job is unknown (or gone)
			default:
				var nl *NotLeaderError
				if errors.As(wrap(err), &nl) && nl.LeaderAddress != "" {
					c.redirect(nl.LeaderAddress)
				} else if classify(err) != retrySame {
					c.unreachable(url)
				}
				pause = min(cmp.Or(interval, heartbeatRetry), heartbeatRetry)
			}
			t := time.NewTimer(pause)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// heartbeatRetry is the longest pause before a failed client heartbeat
// is sent again.
const heartbeatRetry = 500 * time.Millisecond

// TaskOutput reads the output that the TaskExecutor keeps of one
// subtask's attempt (the latest, unless the request names one): the bytes
// from req's offset, at most max_bytes of them. Call it again from the
// answer's next_offset to follow the output; once the answer says the
// attempt ended and next_offset reached end_offset, no more will come. A
// TaskExecutor that did not answer (TASK_EXECUTOR_UNREACHABLE) is retried
// at the leader; output that is no longer kept is EXECUTION_NOT_FOUND (a
// NOT_FOUND *Error that is not ErrJobNotFound).
func (c *Client) TaskOutput(ctx context.Context, req *jobplanev1.GetTaskOutputRequest) (*jobplanev1.GetTaskOutputResponse, error) {
	return call(ctx, c, true, func(ctx context.Context, d jobplanev1connect.DispatcherServiceClient) (*jobplanev1.GetTaskOutputResponse, error) {
		return d.GetTaskOutput(ctx, req)
	})
}

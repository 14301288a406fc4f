package dispatcher

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/durationpb"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/sdk/jobgraph"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/internal/framing"
	"github.com/jobplane/jobplane/server/internal/jobmaster"
	"github.com/jobplane/jobplane/server/internal/principal"
	"github.com/jobplane/jobplane/server/internal/telemetry"
	"github.com/jobplane/jobplane/server/internal/unknownfield"
)

// Handler serves DispatcherService for a Dispatcher, translating between
// the wire and the Dispatcher's domain errors.
type Handler struct {
	jobplanev1connect.UnimplementedDispatcherServiceHandler
	d *Dispatcher
	// Heartbeat is the idle time after which WatchJob sends a heartbeat,
	// as GetClusterOverview advertises it. Default:
	// DefaultStreamHeartbeat.
	Heartbeat time.Duration
}

// NewHandler returns the DispatcherService handler of d.
func NewHandler(d *Dispatcher) *Handler { return &Handler{d: d, Heartbeat: DefaultStreamHeartbeat} }

// Path returns the URL path and HTTP handler of the service, built with
// opts. As the public API, it refuses requests that carry fields it does
// not know, in binary and JSON, with INVALID_ARGUMENT naming each (see
// package unknownfield): a misspelt field must not silently mean "unset".
// Its options come after opts, so that a caller cannot turn this off. A
// malformed envelope (gRPC, gRPC-Web, Connect streaming) gets
// INVALID_ARGUMENT too (see package framing).
func (h *Handler) Path(opts ...connect.HandlerOption) (string, http.Handler) {
	path, handler := jobplanev1connect.NewDispatcherServiceHandler(h, slices.Concat(opts, unknownfield.HandlerOptions())...)
	return path, framing.Strict(handler)
}

// leaderLookupTimeout bounds the store read that finds the leader's
// address for a NOT_LEADER answer.
const leaderLookupTimeout = 300 * time.Millisecond

// wire maps a Dispatcher error to its wire form.
func (h *Handler) wire(ctx context.Context, err error, jobID string) error {
	var (
		jerr  *jobgraph.Error
		exist *ExistsError
		limit *LimitError
		term  *TerminalError
		nterm *NotTerminalError
		nosp  *SavepointNotFoundError
		norun *RunNotFoundError
		dirty *CleanupPendingError
		notof *NotOfferedError
		cerr  *connect.Error
	)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrNotLeading):
		// The leader's address is a courtesy: a server cut off from the
		// store (partitioned, or the store without a quorum) answers
		// NOT_LEADER all the same, without it, rather than not at all.
		addr := ""
		lctx, cancel := context.WithTimeout(ctx, leaderLookupTimeout)
		defer cancel()
		if info, lerr := h.d.cfg.Store.Leader(lctx, election.JobManager); lerr == nil {
			addr = info.Address
		}
		return apierror.NotLeader(election.JobManager, addr)
	case errors.As(err, &jerr):
		fields := make([]apierror.Field, len(jerr.Violations))
		for i, v := range jerr.Violations {
			fields[i] = apierror.Field{Path: v.Field, Description: v.Description}
		}
		return apierror.BadRequest(fields...)
	case errors.As(err, &limit):
		md := map[string]string{"job_id": limit.JobID, "limit": strconv.Itoa(limit.Limit)}
		reason := jobplanev1.ErrorReason_ERROR_REASON_TOO_MANY_JOBS
		msg := fmt.Sprintf("the cluster's live jobs are at its limit of %d; submit the job again once jobs end", limit.Limit)
		if limit.Subtasks {
			reason = jobplanev1.ErrorReason_ERROR_REASON_TOO_MANY_SUBTASKS
			md["job_subtasks"], md["live_subtasks"] = strconv.Itoa(limit.JobSubtasks), strconv.Itoa(limit.LiveSubtasks)
			msg = fmt.Sprintf("the job's %d subtasks and the live jobs' %d are more than the %d the cluster allows; submit the job again once jobs end",
				limit.JobSubtasks, limit.LiveSubtasks, limit.Limit)
		}
		telemetry.LimitRefused(ctx, apierror.Reason(reason))
		return apierror.New(reason, msg, md)
	case errors.As(err, &notof):
		return notOffered(notof)
	case errors.As(err, &exist) && exist.OtherOwner:
		// Nothing of the other principal's job is told, not even whether
		// it ended.
		return apierror.New(jobplanev1.ErrorReason_ERROR_REASON_JOB_ALREADY_EXISTS, "job id "+exist.JobID+" is taken by another principal's job; submit under another id", map[string]string{
			"job_id": exist.JobID, "globally_terminated": "false", "other_principal": "true",
		})
	case errors.As(err, &exist):
		return apierror.New(jobplanev1.ErrorReason_ERROR_REASON_JOB_ALREADY_EXISTS, err.Error(), map[string]string{
			"job_id": exist.JobID, "globally_terminated": strconv.FormatBool(exist.GloballyTerminated),
		})
	case errors.Is(err, ErrStreamBehind):
		return apierror.New(jobplanev1.ErrorReason_ERROR_REASON_STREAM_BEHIND, "the watch fell behind the job's changes; watch again with the last resume token", map[string]string{"job_id": jobID})
	case errors.Is(err, ErrResumeTokenOfAnotherJob):
		return apierror.BadRequest(apierror.Field{Path: "resume_token", Description: "the resume token of another job"})
	case errors.Is(err, ErrCancelNotRecorded):
		return apierror.New(jobplanev1.ErrorReason_ERROR_REASON_CANCEL_NOT_RECORDED, "the HA store did not confirm the cancel request; nothing was done, cancel again", map[string]string{"job_id": jobID})
	case errors.Is(err, ErrOutcomeUnknown):
		return apierror.New(jobplanev1.ErrorReason_ERROR_REASON_PERSIST_OUTCOME_UNKNOWN, "the HA store did not confirm the job's plan; retry the same submission", map[string]string{"job_id": jobID})
	case errors.Is(err, ErrPersistFailed):
		return apierror.New(jobplanev1.ErrorReason_ERROR_REASON_PERSIST_FAILED, "the job's plan could not be persisted; nothing runs, and the submission may be retried", map[string]string{"job_id": jobID})
	case errors.As(err, &norun):
		return apierror.New(jobplanev1.ErrorReason_ERROR_REASON_JOB_NOT_FOUND, "job "+jobID+" has no run "+norun.RunID+": its current job is another run", map[string]string{"job_id": jobID, "run_id": norun.RunID})
	case errors.As(err, &dirty):
		return apierror.New(jobplanev1.ErrorReason_ERROR_REASON_JOB_RESULT_DIRTY, err.Error(), map[string]string{"job_id": jobID})
	case errors.Is(err, ErrJobNotFound):
		return apierror.New(jobplanev1.ErrorReason_ERROR_REASON_JOB_NOT_FOUND, "no job "+jobID, map[string]string{"job_id": jobID})
	case errors.As(err, &term):
		return apierror.New(jobplanev1.ErrorReason_ERROR_REASON_JOB_TERMINAL, err.Error(), map[string]string{"job_id": jobID, "status": term.Status.String()})
	case errors.As(err, &nterm):
		return apierror.New(jobplanev1.ErrorReason_ERROR_REASON_JOB_NOT_TERMINAL, err.Error(), map[string]string{"job_id": jobID, "status": nterm.Status.String()})
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return apierror.Complete(err)
	case errors.Is(err, hastore.ErrUnavailable):
		return apierror.New(jobplanev1.ErrorReason_ERROR_REASON_STORE_UNAVAILABLE, "the HA store is unavailable; retry", nil)
	case errors.Is(err, ErrNoCheckpoints):
		return connect.NewError(connect.CodeUnimplemented, err)
	case errors.As(err, &nosp):
		return apierror.New(jobplanev1.ErrorReason_ERROR_REASON_SAVEPOINT_NOT_FOUND, err.Error(), map[string]string{"savepoint_id": nosp.ID})
	case errors.Is(err, ErrSavepointNotTaken):
		return apierror.New(jobplanev1.ErrorReason_ERROR_REASON_SAVEPOINT_FAILED, err.Error(), map[string]string{"job_id": jobID})
	case errors.As(err, &cerr):
		return cerr // the JobMaster's own answer (SAVEPOINT_FAILED, NOT_LEADER)
	}
	h.d.log.Error("dispatcher call failed", "job", jobID, "err", err)
	return apierror.New(jobplanev1.ErrorReason_ERROR_REASON_INTERNAL, "internal error", nil)
}

// authorize asks the call's Authorizer, if authentication is on (see
// principal.Authorize), whether its principal may call procedure on
// jobID (none if empty), whose owner it looks up (but for SubmitJob,
// which is judged before its job exists: the Dispatcher refuses another
// principal's job id itself). A job that is not found
// is judged as one without an owner, so that a refusal does not tell
// whether a job exists; on a standby, the call is answered NOT_LEADER,
// as it would be without authentication.
func (h *Handler) authorize(ctx context.Context, procedure, jobID string) error {
	if !principal.Authorizing(ctx) {
		return nil
	}
	owner := ""
	if jobID != "" && procedure != jobplanev1connect.DispatcherServiceSubmitJobProcedure {
		var err error
		owner, err = h.d.Owner(ctx, jobID)
		if err != nil && !errors.Is(err, ErrJobNotFound) {
			return h.wire(ctx, err, jobID)
		}
	}
	err := principal.Authorize(ctx, procedure, jobID, owner)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, principal.ErrDenied):
		return connect.NewError(connect.CodePermissionDenied, err)
	}
	h.d.log.Error("authorization failed", "procedure", procedure, "job", jobID, "err", err)
	return apierror.New(jobplanev1.ErrorReason_ERROR_REASON_INTERNAL, "internal error", nil)
}

func checkJobID(id string) error {
	if !hastore.ValidJobID(id) {
		return apierror.BadRequest(apierror.Field{Path: "job_id", Description: "want 1 to 64 characters from [A-Za-z0-9_-]"})
	}
	return nil
}

// checkRun checks a request's job id and run id.
func checkRun(jobID, runID string) error {
	if err := checkJobID(jobID); err != nil {
		return err
	}
	if len(runID) > hastore.MaxRunIDLength {
		return apierror.BadRequest(apierror.Field{Path: "run_id", Description: fmt.Sprintf("longer than %d bytes", hastore.MaxRunIDLength)})
	}
	return nil
}

// checkCancel checks a CancelJob's fields, with a violation per bad one.
func checkCancel(req *jobplanev1.CancelJobRequest) error {
	var fields []apierror.Field
	if !hastore.ValidJobID(req.GetJobId()) {
		fields = append(fields, apierror.Field{Path: "job_id", Description: "want 1 to 64 characters from [A-Za-z0-9_-]"})
	}
	for _, f := range []struct {
		path, value string
		max         int
	}{
		{"run_id", req.GetRunId(), hastore.MaxRunIDLength},
		{"request_id", req.GetRequestId(), hastore.MaxCancelRequestIDLength},
		{"reason", req.GetReason(), hastore.MaxCancelReasonLength},
	} {
		if len(f.value) > f.max {
			fields = append(fields, apierror.Field{Path: f.path, Description: fmt.Sprintf("longer than %d bytes", f.max)})
		}
	}
	if len(fields) > 0 {
		return apierror.BadRequest(fields...)
	}
	return nil
}

// SubmitJob implements DispatcherServiceHandler.
func (h *Handler) SubmitJob(ctx context.Context, req *jobplanev1.SubmitJobRequest) (*jobplanev1.SubmitJobResponse, error) {
	if err := checkJobID(req.GetJobId()); err != nil {
		return nil, err
	}
	if err := h.authorize(ctx, jobplanev1connect.DispatcherServiceSubmitJobProcedure, req.GetJobId()); err != nil {
		return nil, err
	}
	allow := req.GetIdReuse() == jobplanev1.JobIdReusePolicy_JOB_ID_REUSE_POLICY_ALLOW_DUPLICATE
	out, err := h.d.SubmitReusing(ctx, req.GetJobId(), req.GetJobGraph(), allow)
	if err != nil {
		return nil, h.wire(ctx, err, req.GetJobId())
	}
	return &jobplanev1.SubmitJobResponse{JobId: req.GetJobId(), Created: out.Created, Status: out.Status, RunId: out.RunID}, nil
}

// GetJob implements DispatcherServiceHandler.
func (h *Handler) GetJob(ctx context.Context, req *jobplanev1.GetJobRequest) (*jobplanev1.GetJobResponse, error) {
	if err := checkRun(req.GetJobId(), req.GetRunId()); err != nil {
		return nil, err
	}
	if err := h.authorize(ctx, jobplanev1connect.DispatcherServiceGetJobProcedure, req.GetJobId()); err != nil {
		return nil, err
	}
	full := req.GetView() == jobplanev1.JobView_JOB_VIEW_FULL
	page := jobmaster.Page{Size: int(req.GetPageSize())}
	switch {
	case page.Size < 0:
		return nil, apierror.BadRequest(apierror.Field{Path: "page_size", Description: "must not be negative"})
	case page.Size == 0:
		page.Size = 1000
	case page.Size > maxSubtaskPageSize:
		page.Size = maxSubtaskPageSize
	}
	if tok := req.GetPageToken(); tok != "" {
		offset, ok := subtaskOffset(tok, req.GetJobId())
		if !ok {
			return nil, apierror.BadRequest(apierror.Field{Path: "page_token", Description: "not a token this server issued for the job"})
		}
		page.Offset = offset
	}
	det, next, err := h.d.Details(ctx, req.GetJobId(), req.GetRunId(), full, page)
	if err != nil {
		return nil, h.wire(ctx, err, req.GetJobId())
	}
	resp := &jobplanev1.GetJobResponse{Job: det}
	if full && next >= 0 {
		resp.NextPageToken = base64.RawURLEncoding.EncodeToString([]byte(req.GetJobId() + "/" + strconv.Itoa(next)))
	}
	return resp, nil
}

// subtaskOffset decodes a GetJob page token issued for jobID.
func subtaskOffset(token, jobID string) (int, bool) {
	raw, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return 0, false
	}
	id, n, found := strings.Cut(string(raw), "/")
	offset, err := strconv.Atoi(n)
	if !found || id != jobID || err != nil || offset < 0 {
		return 0, false
	}
	return offset, true
}

// listPageSize is the page size a List call asked for: 100 if none, at
// most maxListPageSize.
func listPageSize(n int32) (int, error) {
	switch {
	case n < 0:
		return 0, apierror.BadRequest(apierror.Field{Path: "page_size", Description: "must not be negative"})
	case n == 0:
		return 100, nil
	}
	return min(int(n), maxListPageSize), nil
}

// ListJobs implements DispatcherServiceHandler. The page token is the
// cursor of the last job listed (see listCursor), so a page costs the same
// however deep into the list it is, and stays exact while jobs are added.
func (h *Handler) ListJobs(ctx context.Context, req *jobplanev1.ListJobsRequest) (*jobplanev1.ListJobsResponse, error) {
	if err := h.authorize(ctx, jobplanev1connect.DispatcherServiceListJobsProcedure, ""); err != nil {
		return nil, err
	}
	size, err := listPageSize(req.GetPageSize())
	if err != nil {
		return nil, err
	}
	var after *Cursor
	if tok := req.GetPageToken(); tok != "" {
		c, ok := decodeListCursor(tok)
		if !ok {
			return nil, apierror.BadRequest(apierror.Field{Path: "page_token", Description: "not a token this server issued"})
		}
		after = &c
	}
	jobs, next, err := h.d.List(ctx, req.GetStatuses(), after, size)
	if err != nil {
		return nil, h.wire(ctx, err, "")
	}
	resp := &jobplanev1.ListJobsResponse{Jobs: jobs}
	if next != nil {
		resp.NextPageToken = encodeListCursor(*next)
	}
	return resp, nil
}

// listCursorVersion starts every ListJobs page token: a version byte, then
// the submit time in Unix nanoseconds (8 bytes, big-endian), then the job
// id; all base64url without padding. The version lets the format change,
// and turns away the offset tokens of earlier servers (digits in ASCII).
const listCursorVersion = 1

func encodeListCursor(c Cursor) string {
	raw := make([]byte, 0, 9+len(c.JobID))
	raw = append(raw, listCursorVersion)
	raw = binary.BigEndian.AppendUint64(raw, uint64(c.SubmitTime.UnixNano()))
	raw = append(raw, c.JobID...)
	return base64.RawURLEncoding.EncodeToString(raw)
}

// decodeListCursor decodes a token of encodeListCursor; ok is false for
// anything else.
func decodeListCursor(token string) (c Cursor, ok bool) {
	raw, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil || len(raw) < 10 || raw[0] != listCursorVersion {
		return Cursor{}, false
	}
	id := string(raw[9:])
	if !hastore.ValidJobID(id) {
		return Cursor{}, false
	}
	nanos := int64(binary.BigEndian.Uint64(raw[1:9]))
	return Cursor{SubmitTime: time.Unix(0, nanos), JobID: id}, true
}

// CancelJob implements DispatcherServiceHandler.
func (h *Handler) CancelJob(ctx context.Context, req *jobplanev1.CancelJobRequest) (*jobplanev1.CancelJobResponse, error) {
	if err := checkCancel(req); err != nil {
		return nil, err
	}
	if err := h.authorize(ctx, jobplanev1connect.DispatcherServiceCancelJobProcedure, req.GetJobId()); err != nil {
		return nil, err
	}
	st, err := h.d.CancelRun(ctx, req.GetJobId(), CancelRequest{RunID: req.GetRunId(), RequestID: req.GetRequestId(), Reason: req.GetReason()})
	if err != nil {
		return nil, h.wire(ctx, err, req.GetJobId())
	}
	return &jobplanev1.CancelJobResponse{Status: st}, nil
}

// GetJobResult implements DispatcherServiceHandler.
func (h *Handler) GetJobResult(ctx context.Context, req *jobplanev1.GetJobResultRequest) (*jobplanev1.GetJobResultResponse, error) {
	if err := checkRun(req.GetJobId(), req.GetRunId()); err != nil {
		return nil, err
	}
	if err := h.authorize(ctx, jobplanev1connect.DispatcherServiceGetJobResultProcedure, req.GetJobId()); err != nil {
		return nil, err
	}
	res, err := h.d.Result(ctx, req.GetJobId(), req.GetRunId(), req.GetWait())
	if err != nil {
		return nil, h.wire(ctx, err, req.GetJobId())
	}
	return &jobplanev1.GetJobResultResponse{Result: res}, nil
}

// PurgeJob implements DispatcherServiceHandler.
func (h *Handler) PurgeJob(ctx context.Context, req *jobplanev1.PurgeJobRequest) (*jobplanev1.PurgeJobResponse, error) {
	if err := checkRun(req.GetJobId(), req.GetRunId()); err != nil {
		return nil, err
	}
	if err := h.authorize(ctx, jobplanev1connect.DispatcherServicePurgeJobProcedure, req.GetJobId()); err != nil {
		return nil, err
	}
	if err := h.d.Purge(ctx, req.GetJobId(), req.GetRunId()); err != nil {
		return nil, h.wire(ctx, err, req.GetJobId())
	}
	return &jobplanev1.PurgeJobResponse{}, nil
}

// WatchJob implements DispatcherServiceHandler.
func (h *Handler) WatchJob(ctx context.Context, req *jobplanev1.WatchJobRequest, stream *connect.ServerStream[jobplanev1.WatchJobResponse]) error {
	if err := checkRun(req.GetJobId(), req.GetRunId()); err != nil {
		return err
	}
	if err := h.authorize(ctx, jobplanev1connect.DispatcherServiceWatchJobProcedure, req.GetJobId()); err != nil {
		return err
	}
	err := h.d.Watch(ctx, req.GetJobId(), req.GetRunId(), req.GetResumeToken(), h.Heartbeat, func(ev WatchEvent) error {
		if ev.Summary == nil {
			return stream.Send(&jobplanev1.WatchJobResponse{Event: &jobplanev1.WatchJobResponse_Heartbeat{Heartbeat: &jobplanev1.Heartbeat{}}})
		}
		return stream.Send(&jobplanev1.WatchJobResponse{
			Event: &jobplanev1.WatchJobResponse_Job{Job: ev.Summary}, ResumeToken: ev.ResumeToken, Coalesced: ev.Coalesced,
		})
	})
	if ctx.Err() != nil {
		return nil
	}
	return h.wire(ctx, err, req.GetJobId())
}

// ReportClientHeartbeat implements DispatcherServiceHandler.
func (h *Handler) ReportClientHeartbeat(ctx context.Context, req *jobplanev1.ReportClientHeartbeatRequest) (*jobplanev1.ReportClientHeartbeatResponse, error) {
	if err := checkJobID(req.GetJobId()); err != nil {
		return nil, err
	}
	if err := h.authorize(ctx, jobplanev1connect.DispatcherServiceReportClientHeartbeatProcedure, req.GetJobId()); err != nil {
		return nil, err
	}
	deadline, err := h.d.ClientHeartbeat(ctx, req.GetJobId())
	if err != nil {
		return nil, h.wire(ctx, err, req.GetJobId())
	}
	resp := &jobplanev1.ReportClientHeartbeatResponse{}
	if !deadline.IsZero() {
		resp.Timeout = durationpb.New(max(time.Until(deadline), 0))
	}
	return resp, nil
}

// ListTaskExecutors implements DispatcherServiceHandler. The page token
// is the last TaskExecutor id of the previous page, base64url.
func (h *Handler) ListTaskExecutors(ctx context.Context, req *jobplanev1.ListTaskExecutorsRequest) (*jobplanev1.ListTaskExecutorsResponse, error) {
	if err := h.authorize(ctx, jobplanev1connect.DispatcherServiceListTaskExecutorsProcedure, ""); err != nil {
		return nil, err
	}
	size, err := listPageSize(req.GetPageSize())
	if err != nil {
		return nil, err
	}
	after, err := base64.RawURLEncoding.DecodeString(req.GetPageToken())
	if err != nil {
		return nil, apierror.BadRequest(apierror.Field{Path: "page_token", Description: "not a token this API issues"})
	}
	tes, next, err := h.d.TaskExecutors(ctx, string(after), size)
	if err != nil {
		return nil, h.wire(ctx, err, "")
	}
	resp := &jobplanev1.ListTaskExecutorsResponse{TaskExecutors: tes}
	if next != "" {
		resp.NextPageToken = base64.RawURLEncoding.EncodeToString([]byte(next))
	}
	return resp, nil
}

// GetClusterOverview implements DispatcherServiceHandler.
func (h *Handler) GetClusterOverview(ctx context.Context, _ *jobplanev1.GetClusterOverviewRequest) (*jobplanev1.GetClusterOverviewResponse, error) {
	if err := h.authorize(ctx, jobplanev1connect.DispatcherServiceGetClusterOverviewProcedure, ""); err != nil {
		return nil, err
	}
	resp, err := h.d.Overview(ctx)
	if err != nil {
		return nil, h.wire(ctx, err, "")
	}
	resp.Timings = h.d.timings(h.Heartbeat)
	return resp, nil
}

// execHint is added to the violation of a vertex that names exec, which
// TaskExecutors offer only when they are allowed to run it.
const execHint = "; exec is offered only by TaskExecutors that run it: jobplane taskexecutor or standalone with --allow-exec, or an SDK worker with worker.Config.AllowExec"

// notOffered is the wire form of e: FAILED_PRECONDITION
// (INVOKABLE_NOT_OFFERED) with a BadRequest violation for each vertex's
// invokable field.
func notOffered(e *NotOfferedError) *connect.Error {
	missing := e.Missing()
	offered := strings.Join(e.Offered, ", ")
	if offered == "" {
		offered = "none"
	}
	msg := fmt.Sprintf("no registered TaskExecutor offers the invokables %s (they offer: %s); nothing was done: submit the job again once a TaskExecutor that offers them has joined",
		strings.Join(missing, ", "), offered)
	err := apierror.New(jobplanev1.ErrorReason_ERROR_REASON_INVOKABLE_NOT_OFFERED, msg, map[string]string{
		"invokables": strings.Join(missing, ","), "offered": strings.Join(e.Offered, ","),
	})
	br := &errdetails.BadRequest{}
	for k, i := range e.Vertices {
		desc := fmt.Sprintf("no registered TaskExecutor offers invokable %q", e.Invokables[k])
		if e.Invokables[k] == "exec" {
			desc += execHint
		}
		br.FieldViolations = append(br.FieldViolations, &errdetails.BadRequest_FieldViolation{
			Field: fmt.Sprintf("job_graph.vertices[%d].invokable", i), Description: desc,
		})
	}
	if d, derr := connect.NewErrorDetail(br); derr == nil {
		err.AddDetail(d)
	}
	return err
}

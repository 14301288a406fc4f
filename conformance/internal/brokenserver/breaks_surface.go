package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/proto"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
)

// childMaxRequestBytes is the child's request limit, its
// --max-request-bytes default.
const childMaxRequestBytes = 4 << 20

// surfaceBreaks are the modes mountSurfaceBreaks breaks: the advertised
// limits, GetJob's full view and its page tokens, and EAGER scheduling.
var surfaceBreaks = []string{"limits-not-enforced", "request-too-large-bare", "graph-limit-unnamed", "list-page-size-refused",
	"full-view-unpaged", "page-token-any-job", "page-token-per-leader", "eager-ignored", "watch-coalesced-unmarked",
	"watch-behind-ends-ok", "page-tokens-private", "graph-paths-unquoted"}

// mountSurfaceBreaks mounts the Dispatcher calls that a surface mode
// breaks; childAddr is the child's URL.
func mountSurfaceBreaks(mux *http.ServeMux, mode, childAddr string, d jobplanev1connect.DispatcherServiceClient) {
	submit := func(f func(context.Context, *jobplanev1.SubmitJobRequest) (*jobplanev1.SubmitJobResponse, error), opts ...connect.HandlerOption) {
		p := jobplanev1connect.DispatcherServiceSubmitJobProcedure
		mux.Handle(p, connect.NewUnaryHandler(p, func(ctx context.Context, req *connect.Request[jobplanev1.SubmitJobRequest]) (*connect.Response[jobplanev1.SubmitJobResponse], error) {
			resp, err := f(ctx, req.Msg)
			if err != nil {
				return nil, err
			}
			return connect.NewResponse(resp), nil
		}, opts...))
	}
	getJob := func(f func(context.Context, *jobplanev1.GetJobRequest) (*jobplanev1.GetJobResponse, error)) {
		p := jobplanev1connect.DispatcherServiceGetJobProcedure
		mux.Handle(p, connect.NewUnaryHandler(p, func(ctx context.Context, req *connect.Request[jobplanev1.GetJobRequest]) (*connect.Response[jobplanev1.GetJobResponse], error) {
			resp, err := f(ctx, req.Msg)
			if err != nil {
				return nil, err
			}
			return connect.NewResponse(resp), nil
		}))
	}
	switch mode {
	case "limits-not-enforced":
		// Advertises limits far below those it enforces: a client that
		// keeps within them is safe, but what is over them is taken.
		p := jobplanev1connect.DispatcherServiceGetClusterOverviewProcedure
		mux.Handle(p, connect.NewUnaryHandler(p, func(ctx context.Context, req *connect.Request[jobplanev1.GetClusterOverviewRequest]) (*connect.Response[jobplanev1.GetClusterOverviewResponse], error) {
			resp, err := d.GetClusterOverview(ctx, req.Msg)
			if err != nil {
				return nil, err
			}
			if resp.Limits == nil {
				resp.Limits = &jobplanev1.ServerLimits{}
			}
			l := resp.Limits
			l.MaxRequestBytes, l.MaxGraphBytes, l.MaxVertices, l.MaxSubtasks, l.MaxListPageSize = 64<<10, 4<<10, 2, 4, 2
			return connect.NewResponse(resp), nil
		}))
	case "request-too-large-bare":
		// Leaves an over-large request to the RPC framework, which
		// refuses it with a bare RESOURCE_EXHAUSTED, no ErrorInfo.
		submit(d.SubmitJob, connect.WithReadMaxBytes(childMaxRequestBytes))
	case "graph-limit-unnamed":
		// Refuses a graph over a limit without naming the field.
		submit(func(ctx context.Context, req *jobplanev1.SubmitJobRequest) (*jobplanev1.SubmitJobResponse, error) {
			resp, err := d.SubmitJob(ctx, req)
			var cerr *connect.Error
			if err == nil || !errors.As(err, &cerr) || !strings.Contains(cerr.Message(), "over the limit") {
				return resp, err
			}
			return nil, rewritePaths(cerr, func(string) string { return "" })
		})
	case "graph-paths-unquoted":
		// Names a map entry by its bare key, parallelism_overrides[v]
		// for parallelism_overrides["v"].
		submit(func(ctx context.Context, req *jobplanev1.SubmitJobRequest) (*jobplanev1.SubmitJobResponse, error) {
			resp, err := d.SubmitJob(ctx, req)
			var cerr *connect.Error
			if err == nil || !errors.As(err, &cerr) {
				return resp, err
			}
			return nil, rewritePaths(cerr, strings.NewReplacer(`["`, "[", `"]`, "]").Replace)
		})
	case "page-tokens-private":
		// Writes page tokens of its own form (the reference's, behind a
		// prefix): good at any process of this implementation, at a
		// leader of another one not.
		const prefix = "v2~"
		unwrap := func(tok string) (string, error) {
			if tok == "" {
				return "", nil
			}
			if t, ok := strings.CutPrefix(tok, prefix); ok {
				return t, nil
			}
			return "", connect.NewError(connect.CodeInvalidArgument, errors.New("page_token: not issued by this server"))
		}
		wrap := func(tok string) string {
			if tok == "" {
				return ""
			}
			return prefix + tok
		}
		mountPaged(mux, jobplanev1connect.DispatcherServiceGetJobProcedure, d.GetJob, unwrap, wrap,
			func(m *jobplanev1.GetJobRequest) *string { return &m.PageToken }, func(m *jobplanev1.GetJobResponse) *string { return &m.NextPageToken })
		mountPaged(mux, jobplanev1connect.DispatcherServiceListJobsProcedure, d.ListJobs, unwrap, wrap,
			func(m *jobplanev1.ListJobsRequest) *string { return &m.PageToken }, func(m *jobplanev1.ListJobsResponse) *string { return &m.NextPageToken })
		mountPaged(mux, jobplanev1connect.DispatcherServiceListTaskExecutorsProcedure, d.ListTaskExecutors, unwrap, wrap,
			func(m *jobplanev1.ListTaskExecutorsRequest) *string { return &m.PageToken },
			func(m *jobplanev1.ListTaskExecutorsResponse) *string { return &m.NextPageToken })
	case "list-page-size-refused":
		// Refuses a ListJobs page size over its limit instead of
		// lowering it.
		p := jobplanev1connect.DispatcherServiceListJobsProcedure
		mux.Handle(p, connect.NewUnaryHandler(p, func(ctx context.Context, req *connect.Request[jobplanev1.ListJobsRequest]) (*connect.Response[jobplanev1.ListJobsResponse], error) {
			if req.Msg.GetPageSize() > 1000 {
				return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("page_size: over the limit of 1000"))
			}
			resp, err := d.ListJobs(ctx, req.Msg)
			if err != nil {
				return nil, err
			}
			return connect.NewResponse(resp), nil
		}))
	case "full-view-unpaged":
		// Lists every subtask on one page, whatever the page size.
		getJob(func(ctx context.Context, req *jobplanev1.GetJobRequest) (*jobplanev1.GetJobResponse, error) {
			msg := proto.CloneOf(req)
			msg.PageSize, msg.PageToken = 0, ""
			return d.GetJob(ctx, msg)
		})
	case "page-token-any-job":
		// Takes a page token it cannot read for the first page.
		getJob(func(ctx context.Context, req *jobplanev1.GetJobRequest) (*jobplanev1.GetJobResponse, error) {
			resp, err := d.GetJob(ctx, req)
			if connect.CodeOf(err) == connect.CodeInvalidArgument && req.GetPageToken() != "" {
				msg := proto.CloneOf(req)
				msg.PageToken = ""
				return d.GetJob(ctx, msg)
			}
			return resp, err
		})
	case "page-token-per-leader":
		// Page tokens name a place in this process's memory: another
		// process, a new leader, does not take them.
		b := make([]byte, 8)
		_, _ = rand.Read(b)
		nonce := hex.EncodeToString(b) + "~"
		getJob(func(ctx context.Context, req *jobplanev1.GetJobRequest) (*jobplanev1.GetJobResponse, error) {
			msg := proto.CloneOf(req)
			if msg.PageToken != "" {
				tok, ok := strings.CutPrefix(msg.PageToken, nonce)
				if !ok {
					return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("page_token: not issued by this server"))
				}
				msg.PageToken = tok
			}
			resp, err := d.GetJob(ctx, msg)
			if err == nil && resp.NextPageToken != "" {
				resp.NextPageToken = nonce + resp.NextPageToken
			}
			return resp, err
		})
	case "watch-coalesced-unmarked":
		// Resumes a watch from a token it no longer keeps with the
		// current summary, without saying that changes were skipped.
		mountWatch(mux, d, watchProxy{pass: func() func(*jobplanev1.WatchJobResponse) bool {
			return func(msg *jobplanev1.WatchJobResponse) bool {
				msg.Coalesced = false
				return true
			}
		}})
	case "watch-behind-ends-ok":
		// Ends a watch that fell behind successfully, as if the job had
		// ended, instead of with STREAM_BEHIND. The child is watched
		// through a 1 KiB stream window, so that it falls behind as soon
		// as this proxy's client does.
		p := new(http.Protocols)
		p.SetUnencryptedHTTP2(true)
		slow := jobplanev1connect.NewDispatcherServiceClient(&http.Client{Transport: &http.Transport{Protocols: p,
			HTTP2: &http.HTTP2Config{MaxReceiveBufferPerStream: 1 << 10}}}, childAddr)
		mountWatch(mux, slow, watchProxy{end: func(_ context.Context, err error) error {
			if info, _ := errorInfo(err); info.GetReason() == "STREAM_BEHIND" {
				return nil
			}
			return err
		}})
	case "eager-ignored":
		// Schedules every job by pipelined regions, EAGER ones too.
		submit(func(ctx context.Context, req *jobplanev1.SubmitJobRequest) (*jobplanev1.SubmitJobResponse, error) {
			if c := req.GetJobGraph().GetConfig(); c.GetSchedulingMode() == jobplanev1.SchedulingMode_SCHEDULING_MODE_EAGER {
				c.SchedulingMode = jobplanev1.SchedulingMode_SCHEDULING_MODE_UNSPECIFIED
			}
			return d.SubmitJob(ctx, req)
		})
	}
}

// mountPaged mounts a paged call that passes each request on by call with
// its page token (the field token points at) unwrapped, and the answer's
// next token (next) wrapped.
func mountPaged[Req, Resp any](mux *http.ServeMux, procedure string, call func(context.Context, *Req) (*Resp, error),
	unwrap func(string) (string, error), wrap func(string) string, token func(*Req) *string, next func(*Resp) *string) {
	mux.Handle(procedure, connect.NewUnaryHandler(procedure, func(ctx context.Context, req *connect.Request[Req]) (*connect.Response[Resp], error) {
		tok, err := unwrap(*token(req.Msg))
		if err != nil {
			return nil, err
		}
		*token(req.Msg) = tok
		resp, err := call(ctx, req.Msg)
		if err != nil {
			return nil, err
		}
		*next(resp) = wrap(*next(resp))
		return connect.NewResponse(resp), nil
	}))
}

// rewritePaths returns cerr with the path of each field violation of its
// BadRequest rewritten by f.
func rewritePaths(cerr *connect.Error, f func(string) string) error {
	out := connect.NewError(cerr.Code(), errors.New(cerr.Message()))
	for _, det := range cerr.Details() {
		v, verr := det.Value()
		if br, ok := v.(*errdetails.BadRequest); ok && verr == nil {
			for _, fv := range br.GetFieldViolations() {
				fv.Field = f(fv.Field)
			}
			if nd, nerr := connect.NewErrorDetail(br); nerr == nil {
				out.AddDetail(nd)
			}
			continue
		}
		out.AddDetail(det)
	}
	return out
}

// errorInfo returns the ErrorInfo detail err carries, if any.
func errorInfo(err error) (*errdetails.ErrorInfo, bool) {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return nil, false
	}
	for _, d := range ce.Details() {
		if v, _ := d.Value(); v != nil {
			if info, ok := v.(*errdetails.ErrorInfo); ok {
				return info, true
			}
		}
	}
	return nil, false
}

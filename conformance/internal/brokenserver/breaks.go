package main

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	"github.com/jobplane/jobplane/gen/jobplane/cluster/v1/clusterv1connect"
	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/server/hastore"
)

// mountBreaks mounts, in front of the proxy's pass-through, the API calls
// that mode breaks.
func mountBreaks(mux *http.ServeMux, mode, childAddr string, st *store, d jobplanev1connect.DispatcherServiceClient, jm clusterv1connect.JobMasterServiceClient, rm clusterv1connect.ResourceManagerServiceClient) {
	unary := func(procedure string, f func(context.Context, *connect.Request[jobplanev1.SubmitJobRequest]) (*connect.Response[jobplanev1.SubmitJobResponse], error)) {
		mux.Handle(procedure, connect.NewUnaryHandler(procedure, f))
	}
	submit := func(ctx context.Context, req *connect.Request[jobplanev1.SubmitJobRequest]) (*jobplanev1.SubmitJobResponse, error) {
		return d.SubmitJob(ctx, req.Msg)
	}
	if slices.Contains(surfaceBreaks, mode) {
		mountSurfaceBreaks(mux, mode, childAddr, d)
		return
	}
	switch mode {
	case "no-token-check":
		mountNoTokenCheck(mux, st, jm, rm)
	case "always-created":
		unary(jobplanev1connect.DispatcherServiceSubmitJobProcedure, func(ctx context.Context, req *connect.Request[jobplanev1.SubmitJobRequest]) (*connect.Response[jobplanev1.SubmitJobResponse], error) {
			resp, err := submit(ctx, req)
			if err != nil {
				return nil, err
			}
			resp.Created = true
			return connect.NewResponse(resp), nil
		})
	case "accept-different-plan", "persist-invalid", "accept-invalid", "standby-no-address", "deposed-answers", "standby-copies-token":
		unary(jobplanev1connect.DispatcherServiceSubmitJobProcedure, func(ctx context.Context, req *connect.Request[jobplanev1.SubmitJobRequest]) (*connect.Response[jobplanev1.SubmitJobResponse], error) {
			resp, err := submit(ctx, req)
			code := connect.CodeOf(err)
			switch {
			case err == nil:
				return connect.NewResponse(resp), nil
			case mode == "accept-different-plan" && code == connect.CodeAlreadyExists:
				return connect.NewResponse(&jobplanev1.SubmitJobResponse{JobId: req.Msg.GetJobId(), Status: jobplanev1.JobStatus_JOB_STATUS_RUNNING}), nil
			case mode == "persist-invalid" && code == connect.CodeInvalidArgument:
				plan := &hastorev1.ExecutionPlan{JobId: req.Msg.GetJobId(), JobGraph: req.Msg.GetJobGraph()}
				_ = st.Store.PutExecutionPlan(ctx, st.fence(), plan)
			case mode == "accept-invalid" && code == connect.CodeInvalidArgument:
				return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("invalid job graph"))
			case mode == "standby-copies-token" && code == connect.CodeUnavailable:
				// A standby that puts the plan itself under the leader's
				// token, read from the store: the store's fence takes it,
				// as it is current, but it is not this process's.
				if info, lerr := st.Store.Leader(ctx, election.JobManager); lerr == nil && !info.Token.IsZero() {
					plan := &hastorev1.ExecutionPlan{JobId: req.Msg.GetJobId(), JobGraph: req.Msg.GetJobGraph()}
					_ = st.Store.PutExecutionPlan(ctx, hastore.Fence{Election: election.JobManager, Token: info.Token}, plan)
				}
				return nil, err
			case mode == "deposed-answers" && code == connect.CodeUnavailable:
				// Answers as the leader it was, whoever leads now.
				return connect.NewResponse(&jobplanev1.SubmitJobResponse{JobId: req.Msg.GetJobId(), Created: true, Status: jobplanev1.JobStatus_JOB_STATUS_INITIALIZING}), nil
			case mode == "standby-no-address" && code == connect.CodeUnavailable:
				e := connect.NewError(connect.CodeUnavailable, errors.New("not the leader"))
				if det, derr := connect.NewErrorDetail(&errdetails.ErrorInfo{Reason: "NOT_LEADER", Domain: "jobplane"}); derr == nil {
					e.AddDetail(det)
				}
				return nil, e
			}
			return nil, err
		})
	case "accept-not-offered":
		// Contract 1.1's behaviour: a job naming an invokable no
		// TaskExecutor offers is acknowledged (and would fail at
		// deployment), not refused.
		unary(jobplanev1connect.DispatcherServiceSubmitJobProcedure, func(ctx context.Context, req *connect.Request[jobplanev1.SubmitJobRequest]) (*connect.Response[jobplanev1.SubmitJobResponse], error) {
			resp, err := submit(ctx, req)
			if connect.CodeOf(err) == connect.CodeFailedPrecondition {
				return connect.NewResponse(&jobplanev1.SubmitJobResponse{JobId: req.Msg.GetJobId(), Created: true, Status: jobplanev1.JobStatus_JOB_STATUS_INITIALIZING}), nil
			}
			if err != nil {
				return nil, err
			}
			return connect.NewResponse(resp), nil
		})
	case "no-task-output":
		// Knows no task output: every GetTaskOutput is an attempt
		// whose placement is no longer known.
		p := jobplanev1connect.DispatcherServiceGetTaskOutputProcedure
		mux.Handle(p, connect.NewUnaryHandler(p, func(ctx context.Context, req *connect.Request[jobplanev1.GetTaskOutputRequest]) (*connect.Response[jobplanev1.GetTaskOutputResponse], error) {
			e := connect.NewError(connect.CodeNotFound, errors.New("where the attempt ran is no longer known"))
			if det, derr := connect.NewErrorDetail(&errdetails.ErrorInfo{Reason: "EXECUTION_NOT_FOUND", Domain: "jobplane"}); derr == nil {
				e.AddDetail(det)
			}
			return nil, e
		}))
	case "no-executors-listed":
		// Lists no TaskExecutor.
		p := jobplanev1connect.DispatcherServiceListTaskExecutorsProcedure
		mux.Handle(p, connect.NewUnaryHandler(p, func(context.Context, *connect.Request[jobplanev1.ListTaskExecutorsRequest]) (*connect.Response[jobplanev1.ListTaskExecutorsResponse], error) {
			return connect.NewResponse(&jobplanev1.ListTaskExecutorsResponse{}), nil
		}))
	case "timings-out-of-bounds", "timings-lie", "inline-limit-unenforced":
		// Advertises timings the contract forbids (a resume window below
		// its floor), or a session TTL shorter than its sessions' (in
		// bounds, but not what it does), or half the inline state limit
		// it enforces (a state over the advertised limit is checkpointed
		// all the same).
		p := jobplanev1connect.DispatcherServiceGetClusterOverviewProcedure
		mux.Handle(p, connect.NewUnaryHandler(p, func(ctx context.Context, req *connect.Request[jobplanev1.GetClusterOverviewRequest]) (*connect.Response[jobplanev1.GetClusterOverviewResponse], error) {
			resp, err := d.GetClusterOverview(ctx, req.Msg)
			if err != nil {
				return nil, err
			}
			if resp.Timings == nil {
				resp.Timings = &jobplanev1.ServerTimings{}
			}
			switch mode {
			case "timings-out-of-bounds":
				resp.Timings.WatchResumeWindow = 8
			case "timings-lie":
				resp.Timings.SessionTtl = durationpb.New(resp.Timings.GetSessionTtl().AsDuration() - 100*time.Millisecond)
			case "inline-limit-unenforced":
				if l := resp.GetLimits(); l != nil {
					l.MaxInlineStateBytes /= 2
				}
			}
			return connect.NewResponse(resp), nil
		}))
	case "unasked-cancel-forgiven":
		// Takes an attempt its TaskExecutor canceled unasked as one that
		// finished: no task failure, nothing restarted.
		passStates(mux, clusterv1connect.JobMasterServiceUpdateTaskExecutionStateProcedure, jm.UpdateTaskExecutionState,
			func(m *clusterv1.UpdateTaskExecutionStateRequest) { forgiveCancel(m.GetStatus()) })
		passStates(mux, clusterv1connect.JobMasterServiceUpdateTaskExecutionStatesProcedure, jm.UpdateTaskExecutionStates,
			func(m *clusterv1.UpdateTaskExecutionStatesRequest) { forgiveCancel(m.GetStatuses()...) })
		passStates(mux, clusterv1connect.JobMasterServiceUpdateTaskExecutionStatesOfJobsProcedure, jm.UpdateTaskExecutionStatesOfJobs,
			func(m *clusterv1.UpdateTaskExecutionStatesOfJobsRequest) {
				for _, j := range m.GetJobs() {
					forgiveCancel(j.GetStatuses()...)
				}
			})
	case "detach-every-job":
		// Drops client_heartbeat_timeout: every job is detached, and an
		// attached job's client that goes away leaves it running.
		unary(jobplanev1connect.DispatcherServiceSubmitJobProcedure, func(ctx context.Context, req *connect.Request[jobplanev1.SubmitJobRequest]) (*connect.Response[jobplanev1.SubmitJobResponse], error) {
			if c := req.Msg.GetJobGraph().GetConfig(); c != nil {
				c.ClientHeartbeatTimeout = nil
			}
			resp, err := submit(ctx, req)
			if err != nil {
				return nil, err
			}
			return connect.NewResponse(resp), nil
		})
	case "list-ignores-token":
		// Every ListJobs starts over from the newest job, whatever its
		// page token.
		p := jobplanev1connect.DispatcherServiceListJobsProcedure
		mux.Handle(p, connect.NewUnaryHandler(p, func(ctx context.Context, req *connect.Request[jobplanev1.ListJobsRequest]) (*connect.Response[jobplanev1.ListJobsResponse], error) {
			msg := proto.CloneOf(req.Msg)
			msg.PageToken = ""
			resp, err := d.ListJobs(ctx, msg)
			if err != nil {
				return nil, err
			}
			return connect.NewResponse(resp), nil
		}))
	case "accept-unknown-fields":
		// Decodes leniently: fields the schema does not have are
		// dropped, and the job runs without them.
		unary(jobplanev1connect.DispatcherServiceSubmitJobProcedure, func(ctx context.Context, req *connect.Request[jobplanev1.SubmitJobRequest]) (*connect.Response[jobplanev1.SubmitJobResponse], error) {
			b, err := proto.Marshal(req.Msg)
			if err != nil {
				return nil, err
			}
			lenient := &jobplanev1.SubmitJobRequest{}
			if err := (proto.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(b, lenient); err != nil {
				return nil, err
			}
			resp, err := d.SubmitJob(ctx, lenient)
			if err != nil {
				return nil, err
			}
			return connect.NewResponse(resp), nil
		})
	case "zero-means-unlimited":
		// Contract 1.1's behaviour: a fixed or exponential delay of
		// attempts 0 is taken as unlimited, not refused.
		unary(jobplanev1connect.DispatcherServiceSubmitJobProcedure, func(ctx context.Context, req *connect.Request[jobplanev1.SubmitJobRequest]) (*connect.Response[jobplanev1.SubmitJobResponse], error) {
			rs := req.Msg.GetJobGraph().GetConfig().GetRestartStrategy()
			if fd := rs.GetFixedDelay(); fd != nil && fd.GetAttempts() == 0 {
				fd.Unlimited = true
			}
			if ed := rs.GetExponentialDelay(); ed != nil && ed.GetAttempts() == 0 {
				ed.Unlimited = true
			}
			resp, err := submit(ctx, req)
			if err != nil {
				return nil, err
			}
			return connect.NewResponse(resp), nil
		})
	case "no-normalization":
		// Compares the graph as sent with the stored one, without
		// normalizing either.
		unary(jobplanev1connect.DispatcherServiceSubmitJobProcedure, func(ctx context.Context, req *connect.Request[jobplanev1.SubmitJobRequest]) (*connect.Response[jobplanev1.SubmitJobResponse], error) {
			if plan, err := st.Store.GetExecutionPlan(ctx, req.Msg.GetJobId()); err == nil && !proto.Equal(plan.GetJobGraph(), req.Msg.GetJobGraph()) {
				e := connect.NewError(connect.CodeAlreadyExists, errors.New("the job exists with another plan"))
				if det, derr := connect.NewErrorDetail(&errdetails.ErrorInfo{Reason: "JOB_ALREADY_EXISTS", Domain: "jobplane"}); derr == nil {
					e.AddDetail(det)
				}
				return nil, e
			}
			resp, err := submit(ctx, req)
			if err != nil {
				return nil, err
			}
			return connect.NewResponse(resp), nil
		})
	case "bare-errors":
		// Refusals without their ErrorInfo, as a server that maps errors
		// to codes alone answers.
		p := jobplanev1connect.DispatcherServiceGetJobProcedure
		mux.Handle(p, connect.NewUnaryHandler(p, func(ctx context.Context, req *connect.Request[jobplanev1.GetJobRequest]) (*connect.Response[jobplanev1.GetJobResponse], error) {
			resp, err := d.GetJob(ctx, req.Msg)
			if err != nil {
				var cerr *connect.Error
				if errors.As(err, &cerr) {
					return nil, connect.NewError(cerr.Code(), errors.New(cerr.Message()))
				}
				return nil, err
			}
			return connect.NewResponse(resp), nil
		}))
	case "rm-ignores-receiver-token":
		// Takes every declaration as meant for it, whatever token of it
		// the call carries.
		p := clusterv1connect.ResourceManagerServiceDeclareResourceRequirementsProcedure
		mux.Handle(p, connect.NewUnaryHandler(p, func(ctx context.Context, req *connect.Request[clusterv1.DeclareResourceRequirementsRequest]) (*connect.Response[clusterv1.DeclareResourceRequirementsResponse], error) {
			msg := proto.CloneOf(req.Msg)
			current := st.fence().Token
			msg.ResourceManagerToken = &jobplanev1.FencingToken{SessionId: current.SessionID, Epoch: current.Epoch}
			resp, err := rm.DeclareResourceRequirements(ctx, msg)
			if err != nil {
				return nil, err
			}
			return connect.NewResponse(resp), nil
		}))
	case "rm-checks-job-token-first":
		// Judges the JobMaster token before the ResourceManager's: a
		// JobMaster token older than the job's current grant is refused
		// STALE_FENCING_TOKEN whatever the ResourceManager token.
		jobTokenFirst(mux, clusterv1connect.ResourceManagerServiceDeclareResourceRequirementsProcedure, st, rm.DeclareResourceRequirements)
		jobTokenFirst(mux, clusterv1connect.ResourceManagerServiceDisconnectJobMasterProcedure, st, rm.DisconnectJobMaster)
	case "trust-job-master-token":
		// Takes the caller's word for the job's election: a
		// RegisterJobMaster token newer than the job's grant is what the
		// ResourceManager then reads as the grant (see store.Leader),
		// as a ResourceManager that checks no grant registers it.
		p := clusterv1connect.ResourceManagerServiceRegisterJobMasterProcedure
		mux.Handle(p, connect.NewUnaryHandler(p, func(ctx context.Context, req *connect.Request[clusterv1.RegisterJobMasterRequest]) (*connect.Response[clusterv1.RegisterJobMasterResponse], error) {
			st.claim(req.Msg.GetJobId(), election.Token{SessionID: req.Msg.GetJobMasterToken().GetSessionId(), Epoch: req.Msg.GetJobMasterToken().GetEpoch()})
			resp, err := rm.RegisterJobMaster(ctx, req.Msg)
			if err != nil {
				return nil, err
			}
			return connect.NewResponse(resp), nil
		}))
	case "run-id-ignored":
		// Before 1.2: a request's run_id is not looked at, so a call
		// naming an old run acts on whichever run is current.
		p := jobplanev1connect.DispatcherServiceCancelJobProcedure
		mux.Handle(p, connect.NewUnaryHandler(p, func(ctx context.Context, req *connect.Request[jobplanev1.CancelJobRequest]) (*connect.Response[jobplanev1.CancelJobResponse], error) {
			msg := proto.CloneOf(req.Msg)
			msg.RunId = ""
			resp, err := d.CancelJob(ctx, msg)
			if err != nil {
				return nil, err
			}
			return connect.NewResponse(resp), nil
		}))
		p = jobplanev1connect.DispatcherServiceGetJobResultProcedure
		mux.Handle(p, connect.NewUnaryHandler(p, func(ctx context.Context, req *connect.Request[jobplanev1.GetJobResultRequest]) (*connect.Response[jobplanev1.GetJobResultResponse], error) {
			msg := proto.CloneOf(req.Msg)
			msg.RunId = ""
			resp, err := d.GetJobResult(ctx, msg)
			if err != nil {
				return nil, err
			}
			return connect.NewResponse(resp), nil
		}))
	case "purge-noop":
		p := jobplanev1connect.DispatcherServicePurgeJobProcedure
		mux.Handle(p, connect.NewUnaryHandler(p, func(context.Context, *connect.Request[jobplanev1.PurgeJobRequest]) (*connect.Response[jobplanev1.PurgeJobResponse], error) {
			return connect.NewResponse(&jobplanev1.PurgeJobResponse{}), nil
		}))
	case "id-reuse-ignored":
		// Before 1.2: every resubmission of an ended job answers its
		// kept result.
		unary(jobplanev1connect.DispatcherServiceSubmitJobProcedure, func(ctx context.Context, req *connect.Request[jobplanev1.SubmitJobRequest]) (*connect.Response[jobplanev1.SubmitJobResponse], error) {
			msg := proto.CloneOf(req.Msg)
			msg.IdReuse = jobplanev1.JobIdReusePolicy_JOB_ID_REUSE_POLICY_UNSPECIFIED
			resp, err := d.SubmitJob(ctx, msg)
			if err != nil {
				return nil, err
			}
			return connect.NewResponse(resp), nil
		})
	case "submit-refused-during-purge":
		// A submission of an id whose result is being purged is
		// refused, from the purge's start until a while after its
		// answer, rather than answered from the old run or as a new
		// one.
		var mu sync.Mutex
		purging := map[string]time.Time{} // job id -> until when
		busy := func(id string) bool {
			mu.Lock()
			defer mu.Unlock()
			until, ok := purging[id]
			return ok && time.Now().Before(until)
		}
		p := jobplanev1connect.DispatcherServicePurgeJobProcedure
		mux.Handle(p, connect.NewUnaryHandler(p, func(ctx context.Context, req *connect.Request[jobplanev1.PurgeJobRequest]) (*connect.Response[jobplanev1.PurgeJobResponse], error) {
			mu.Lock()
			purging[req.Msg.GetJobId()] = time.Now().Add(time.Hour)
			mu.Unlock()
			resp, err := d.PurgeJob(ctx, req.Msg)
			mu.Lock()
			purging[req.Msg.GetJobId()] = time.Now().Add(500 * time.Millisecond)
			mu.Unlock()
			if err != nil {
				return nil, err
			}
			return connect.NewResponse(resp), nil
		}))
		unary(jobplanev1connect.DispatcherServiceSubmitJobProcedure, func(ctx context.Context, req *connect.Request[jobplanev1.SubmitJobRequest]) (*connect.Response[jobplanev1.SubmitJobResponse], error) {
			if busy(req.Msg.GetJobId()) {
				return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("the job is being purged"))
			}
			resp, err := submit(ctx, req)
			if err != nil {
				return nil, err
			}
			return connect.NewResponse(resp), nil
		})
	case "cancel-reason-dropped":
		// The cancel request is recorded without its id and reason.
		p := jobplanev1connect.DispatcherServiceCancelJobProcedure
		mux.Handle(p, connect.NewUnaryHandler(p, func(ctx context.Context, req *connect.Request[jobplanev1.CancelJobRequest]) (*connect.Response[jobplanev1.CancelJobResponse], error) {
			msg := proto.CloneOf(req.Msg)
			msg.RequestId, msg.Reason = "", ""
			resp, err := d.CancelJob(ctx, msg)
			if err != nil {
				return nil, err
			}
			return connect.NewResponse(resp), nil
		}))
	case "cancel-noop":
		p := jobplanev1connect.DispatcherServiceCancelJobProcedure
		mux.Handle(p, connect.NewUnaryHandler(p, func(context.Context, *connect.Request[jobplanev1.CancelJobRequest]) (*connect.Response[jobplanev1.CancelJobResponse], error) {
			return connect.NewResponse(&jobplanev1.CancelJobResponse{Status: jobplanev1.JobStatus_JOB_STATUS_CANCELED}), nil
		}))
	case "cancel-after-finish-cancelling":
		// Answers the cancellation of a job that has just finished
		// CANCELLING, as a Dispatcher that answers from the status it
		// last published, not from the store's order of the cancel
		// request and the result; the job stays FINISHED.
		p := jobplanev1connect.DispatcherServiceCancelJobProcedure
		mux.Handle(p, connect.NewUnaryHandler(p, func(ctx context.Context, req *connect.Request[jobplanev1.CancelJobRequest]) (*connect.Response[jobplanev1.CancelJobResponse], error) {
			resp, err := d.CancelJob(ctx, req.Msg)
			var cerr *connect.Error
			if errors.As(err, &cerr) && cerr.Code() == connect.CodeFailedPrecondition {
				return connect.NewResponse(&jobplanev1.CancelJobResponse{Status: jobplanev1.JobStatus_JOB_STATUS_CANCELLING}), nil
			}
			if err != nil {
				return nil, err
			}
			return connect.NewResponse(resp), nil
		}))
	case "deposed-serves-cache":
		// Serves GetJob from a cache of the answers it gave while it led
		// when it no longer leads, as a read cache in front of the
		// Dispatcher that outlives the leadership.
		var cache sync.Map // job id -> *jobplanev1.GetJobResponse
		p := jobplanev1connect.DispatcherServiceGetJobProcedure
		mux.Handle(p, connect.NewUnaryHandler(p, func(ctx context.Context, req *connect.Request[jobplanev1.GetJobRequest]) (*connect.Response[jobplanev1.GetJobResponse], error) {
			resp, err := d.GetJob(ctx, req.Msg)
			if err == nil {
				cache.Store(req.Msg.GetJobId(), resp)
				return connect.NewResponse(resp), nil
			}
			if cached, ok := cache.Load(req.Msg.GetJobId()); ok && connect.CodeOf(err) == connect.CodeUnavailable {
				return connect.NewResponse(cached.(*jobplanev1.GetJobResponse)), nil
			}
			return nil, err
		}))
	case "unknown-result-empty":
		p := jobplanev1connect.DispatcherServiceGetJobResultProcedure
		mux.Handle(p, connect.NewUnaryHandler(p, func(ctx context.Context, req *connect.Request[jobplanev1.GetJobResultRequest]) (*connect.Response[jobplanev1.GetJobResultResponse], error) {
			resp, err := d.GetJobResult(ctx, req.Msg)
			if connect.CodeOf(err) == connect.CodeNotFound {
				return connect.NewResponse(&jobplanev1.GetJobResultResponse{}), nil
			}
			if err != nil {
				return nil, err
			}
			return connect.NewResponse(resp), nil
		}))
	case "restarts-not-watched":
		// Contract 1.1's behaviour: WatchJob reports status changes
		// only, not the restarts of a job that stays RUNNING.
		mountWatch(mux, d, watchProxy{pass: func() func(*jobplanev1.WatchJobResponse) bool {
			last := jobplanev1.JobStatus_JOB_STATUS_UNSPECIFIED
			return func(msg *jobplanev1.WatchJobResponse) bool {
				job := msg.GetJob()
				if job == nil {
					return true
				}
				changed := job.GetStatus() != last
				last = job.GetStatus()
				return changed
			}
		}})
	case "watch-never-ends":
		mountWatch(mux, d, watchProxy{end: func(ctx context.Context, _ error) error {
			<-ctx.Done() // the stream never ends by itself
			return ctx.Err()
		}})
	case "watch-no-resume":
		// Every watch starts over with the current status, as if the
		// resume token were not there, and says nothing.
		mountWatch(mux, d, watchProxy{request: func(req *jobplanev1.WatchJobRequest) *jobplanev1.WatchJobRequest {
			return &jobplanev1.WatchJobRequest{JobId: req.GetJobId()}
		}})
	case "lease-outlives-wait":
		// The TaskExecutors are granted a task lease far longer than the
		// child waits (its own) before it deploys anew what no
		// reachable TaskExecutor listed.
		passLongerLease(mux, clusterv1connect.JobMasterServiceHeartbeatFromTaskExecutorProcedure, jm.HeartbeatFromTaskExecutor)
		passLongerLease(mux, clusterv1connect.JobMasterServiceOfferSlotsProcedure, jm.OfferSlots)
		passLongerLease(mux, clusterv1connect.JobMasterServiceRegisterTaskExecutorProcedure, jm.RegisterTaskExecutor)
	case "ignore-stale-tokens":
		po := clusterv1connect.JobMasterServiceOfferSlotsProcedure
		mux.Handle(po, connect.NewUnaryHandler(po, func(ctx context.Context, req *connect.Request[clusterv1.OfferSlotsRequest]) (*connect.Response[clusterv1.OfferSlotsResponse], error) {
			resp, err := jm.OfferSlots(ctx, req.Msg)
			if connect.CodeOf(err) == connect.CodeAborted {
				return connect.NewResponse(&clusterv1.OfferSlotsResponse{Accepted: req.Msg.GetOffers()}), nil
			}
			if err != nil {
				return nil, err
			}
			return connect.NewResponse(resp), nil
		}))
		pu := clusterv1connect.JobMasterServiceUpdateTaskExecutionStateProcedure
		mux.Handle(pu, connect.NewUnaryHandler(pu, func(ctx context.Context, req *connect.Request[clusterv1.UpdateTaskExecutionStateRequest]) (*connect.Response[clusterv1.UpdateTaskExecutionStateResponse], error) {
			resp, err := jm.UpdateTaskExecutionState(ctx, req.Msg)
			if connect.CodeOf(err) == connect.CodeAborted {
				return connect.NewResponse(&clusterv1.UpdateTaskExecutionStateResponse{}), nil
			}
			if err != nil {
				return nil, err
			}
			return connect.NewResponse(resp), nil
		}))
	}
}

// passStates mounts procedure so that each request is rewritten by
// rewrite before the child's call.
func passStates[Req, Resp any](mux *http.ServeMux, procedure string, call func(context.Context, *Req) (*Resp, error), rewrite func(*Req)) {
	mux.Handle(procedure, connect.NewUnaryHandler(procedure, func(ctx context.Context, req *connect.Request[Req]) (*connect.Response[Resp], error) {
		rewrite(req.Msg)
		resp, err := call(ctx, req.Msg)
		if err != nil {
			return nil, err
		}
		return connect.NewResponse(resp), nil
	}))
}

// forgiveCancel reports every CANCELED attempt among sts as FINISHED.
func forgiveCancel(sts ...*jobplanev1.TaskExecutionStatus) {
	for _, st := range sts {
		if st.GetState() == jobplanev1.ExecutionState_EXECUTION_STATE_CANCELED {
			st.State = jobplanev1.ExecutionState_EXECUTION_STATE_FINISHED
		}
	}
}

// longerLease is the task lease the "lease-outlives-wait" break grants in
// place of the child's own.
const longerLease = time.Minute

// passLongerLease mounts procedure so that an answer of the child's that
// grants a task lease grants longerLease instead.
func passLongerLease[Req, Resp any, PResp interface {
	*Resp
	proto.Message
}](mux *http.ServeMux, procedure string, call func(context.Context, *Req) (PResp, error)) {
	mux.Handle(procedure, connect.NewUnaryHandler(procedure, func(ctx context.Context, req *connect.Request[Req]) (*connect.Response[Resp], error) {
		resp, err := call(ctx, req.Msg)
		if err != nil {
			return nil, err
		}
		m := resp.ProtoReflect()
		if f := m.Descriptor().Fields().ByName("task_lease"); f != nil && m.Has(f) {
			m.Set(f, protoreflect.ValueOfMessage(durationpb.New(longerLease).ProtoReflect()))
		}
		return connect.NewResponse((*Resp)(resp)), nil
	}))
}

// passCurrentToken mounts procedure so that it reaches the child with the
// job's current JobMaster token in place of whatever token the request
// carried, as a server that checks no token would take it.
func passCurrentToken[Req, Resp any, PReq interface {
	*Req
	proto.Message
}](mux *http.ServeMux, procedure string, st *store, call func(context.Context, PReq) (*Resp, error)) {
	mux.Handle(procedure, connect.NewUnaryHandler(procedure, func(ctx context.Context, req *connect.Request[Req]) (*connect.Response[Resp], error) {
		msg := PReq(req.Msg)
		st.currentTokens(ctx, msg.ProtoReflect())
		resp, err := call(ctx, msg)
		if err != nil {
			return nil, err
		}
		return connect.NewResponse(resp), nil
	}))
}

// currentTokens sets the job_master_token of m, and of the messages in
// its field jobs, to the current token of the job m names, and its
// resource_manager_token to the ResourceManager's current one.
func (s *store) currentTokens(ctx context.Context, m protoreflect.Message) {
	fields := m.Descriptor().Fields()
	if jobs := fields.ByName("jobs"); jobs != nil && jobs.IsList() && jobs.Message() != nil {
		list := m.Mutable(jobs).List()
		for i := range list.Len() {
			s.currentTokens(ctx, list.Get(i).Message())
		}
	}
	if rmTk := fields.ByName("resource_manager_token"); rmTk != nil {
		if info, err := s.Store.Leader(ctx, election.JobManager); err == nil && !info.Token.IsZero() {
			current := &jobplanev1.FencingToken{SessionId: info.Token.SessionID, Epoch: info.Token.Epoch}
			m.Set(rmTk, protoreflect.ValueOfMessage(current.ProtoReflect()))
		}
	}
	id, tk := fields.ByName("job_id"), fields.ByName("job_master_token")
	if id == nil || tk == nil {
		return
	}
	info, err := s.Store.Leader(ctx, election.Job(m.Get(id).String()))
	if err != nil || info.Token.IsZero() {
		return
	}
	current := &jobplanev1.FencingToken{SessionId: info.Token.SessionID, Epoch: info.Token.Epoch}
	m.Set(tk, protoreflect.ValueOfMessage(current.ProtoReflect()))
}

// mountNoTokenCheck mounts every fenced JobMaster and ResourceManager call
// with the token check taken out.
func mountNoTokenCheck(mux *http.ServeMux, st *store, jm clusterv1connect.JobMasterServiceClient, rm clusterv1connect.ResourceManagerServiceClient) {
	passCurrentToken(mux, clusterv1connect.JobMasterServiceOfferSlotsProcedure, st, jm.OfferSlots)
	passCurrentToken(mux, clusterv1connect.JobMasterServiceUpdateTaskExecutionStateProcedure, st, jm.UpdateTaskExecutionState)
	passCurrentToken(mux, clusterv1connect.JobMasterServiceUpdateTaskExecutionStatesProcedure, st, jm.UpdateTaskExecutionStates)
	passCurrentToken(mux, clusterv1connect.JobMasterServiceUpdateTaskExecutionStatesOfJobsProcedure, st, jm.UpdateTaskExecutionStatesOfJobs)
	passCurrentToken(mux, clusterv1connect.JobMasterServiceHeartbeatProcedure, st, jm.Heartbeat)
	passCurrentToken(mux, clusterv1connect.JobMasterServiceHeartbeatFromTaskExecutorProcedure, st, jm.HeartbeatFromTaskExecutor)
	passCurrentToken(mux, clusterv1connect.JobMasterServiceRegisterTaskExecutorProcedure, st, jm.RegisterTaskExecutor)
	passCurrentToken(mux, clusterv1connect.JobMasterServiceDisconnectTaskExecutorProcedure, st, jm.DisconnectTaskExecutor)
	passCurrentToken(mux, clusterv1connect.ResourceManagerServiceDeclareResourceRequirementsProcedure, st, rm.DeclareResourceRequirements)
	passCurrentToken(mux, clusterv1connect.ResourceManagerServiceDisconnectJobMasterProcedure, st, rm.DisconnectJobMaster)
	passCurrentToken(mux, clusterv1connect.ResourceManagerServiceRegisterJobMasterProcedure, st, rm.RegisterJobMaster)
	passCurrentToken(mux, clusterv1connect.ResourceManagerServiceRegisterTaskExecutorProcedure, st, rm.RegisterTaskExecutor)
	passCurrentToken(mux, clusterv1connect.ResourceManagerServiceHeartbeatProcedure, st, rm.Heartbeat)
}

// jobTokenFirst mounts procedure so that a request whose JobMaster token
// is older than the current grant of its job's election is refused
// ABORTED (STALE_FENCING_TOKEN) before the child sees it, whatever its
// ResourceManager token: the two checks in the order the contract does
// not take.
func jobTokenFirst[Req, Resp any, PReq interface {
	*Req
	proto.Message
	GetJobId() string
	GetJobMasterToken() *jobplanev1.FencingToken
}](mux *http.ServeMux, procedure string, st *store, call func(context.Context, PReq) (*Resp, error)) {
	mux.Handle(procedure, connect.NewUnaryHandler(procedure, func(ctx context.Context, req *connect.Request[Req]) (*connect.Response[Resp], error) {
		msg := PReq(req.Msg)
		info, err := st.Store.Leader(ctx, election.Job(msg.GetJobId()))
		if tk := msg.GetJobMasterToken(); err == nil && !info.Token.IsZero() && tk.GetEpoch() != 0 && tk.GetEpoch() < info.Token.Epoch {
			e := connect.NewError(connect.CodeAborted, errors.New("stale fencing token for "+election.Job(msg.GetJobId())))
			if det, derr := connect.NewErrorDetail(&errdetails.ErrorInfo{Reason: "STALE_FENCING_TOKEN", Domain: "jobplane"}); derr == nil {
				e.AddDetail(det)
			}
			return nil, e
		}
		resp, err := call(ctx, msg)
		if err != nil {
			return nil, err
		}
		return connect.NewResponse(resp), nil
	}))
}

// watchProxy says how mountWatch's WatchJob differs from the child's:
// request rewrites the request, pass returns, per stream, which of the
// child's messages go on (nil: all), and end turns the child's stream
// error (nil when it ended successfully) into the proxy's (nil: as is).
type watchProxy struct {
	request func(*jobplanev1.WatchJobRequest) *jobplanev1.WatchJobRequest
	pass    func() func(*jobplanev1.WatchJobResponse) bool
	end     func(ctx context.Context, err error) error
}

// mountWatch mounts WatchJob as a proxy of d's, broken as w says.
func mountWatch(mux *http.ServeMux, d jobplanev1connect.DispatcherServiceClient, w watchProxy) {
	p := jobplanev1connect.DispatcherServiceWatchJobProcedure
	mux.Handle(p, connect.NewServerStreamHandler(p, func(ctx context.Context, req *connect.Request[jobplanev1.WatchJobRequest], out *connect.ServerStream[jobplanev1.WatchJobResponse]) error {
		msg := req.Msg
		if w.request != nil {
			msg = w.request(msg)
		}
		in, err := d.WatchJob(ctx, msg)
		if err != nil {
			return err
		}
		defer in.Close()
		pass := func(*jobplanev1.WatchJobResponse) bool { return true }
		if w.pass != nil {
			pass = w.pass()
		}
		for in.Receive() {
			if !pass(in.Msg()) {
				continue
			}
			if err := out.Send(in.Msg()); err != nil {
				return err
			}
		}
		if w.end != nil {
			return w.end(ctx, in.Err())
		}
		return in.Err()
	}))
}

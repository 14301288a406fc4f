package jobmaster

import (
	"context"
	"fmt"
	"slices"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/types/known/durationpb"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
	"github.com/jobplane/jobplane/sdk/wire/jobtrace"
)

// RegisterTaskExecutor implements JobMasterServiceHandler.
func (r *Router) RegisterTaskExecutor(ctx context.Context, req *clusterv1.JobMasterServiceRegisterTaskExecutorRequest) (*clusterv1.JobMasterServiceRegisterTaskExecutorResponse, error) {
	if req.GetTaskExecutorId() == "" || req.GetAddress() == "" {
		return nil, apierror.BadRequest(apierror.Field{Path: "task_executor_id, address", Description: "required"})
	}
	jm, err := r.route(ctx, req.GetJobId(), req.GetJobMasterToken())
	if err != nil {
		return nil, err
	}
	if err := jm.do(ctx, func() { jm.registerExecutor(req.GetTaskExecutorId(), req.GetAddress()) }); err != nil {
		return nil, err
	}
	return &clusterv1.JobMasterServiceRegisterTaskExecutorResponse{
		HeartbeatInterval: durationpb.New(jm.cfg.HeartbeatInterval), HeartbeatTimeout: durationpb.New(jm.cfg.HeartbeatTimeout),
		TaskLease: jm.taskLease(),
	}, nil
}

func notRegistered(jobID, executor string) error {
	return apierror.New(jobplanev1.ErrorReason_ERROR_REASON_NOT_REGISTERED, "TaskExecutor is not registered with the JobMaster",
		map[string]string{"job_id": jobID, "task_executor_id": executor})
}

// OfferSlots implements JobMasterServiceHandler.
func (r *Router) OfferSlots(ctx context.Context, req *clusterv1.OfferSlotsRequest) (*clusterv1.OfferSlotsResponse, error) {
	if req.GetTaskExecutorId() == "" {
		return nil, apierror.BadRequest(apierror.Field{Path: "task_executor_id", Description: "required"})
	}
	jm, err := r.route(ctx, req.GetJobId(), req.GetJobMasterToken())
	if err != nil {
		return nil, err
	}
	resp := &clusterv1.OfferSlotsResponse{
		HeartbeatInterval: durationpb.New(jm.cfg.HeartbeatInterval), HeartbeatTimeout: durationpb.New(jm.cfg.HeartbeatTimeout),
		TaskLease: jm.taskLease(),
	}
	var refused error
	r.heard(req.GetTaskExecutorId())
	if err := jm.do(ctx, func() {
		var freeing []string
		switch {
		case req.GetAddress() != "":
			// Registered by offering, as RegisterTaskExecutor would.
			freeing = jm.registerExecutor(req.GetTaskExecutorId(), req.GetAddress())
		case jm.executors[req.GetTaskExecutorId()] == nil:
			refused = notRegistered(req.GetJobId(), req.GetTaskExecutorId())
			return
		}
		needed := jm.neededLocked()
		for _, o := range req.GetOffers() {
			if slices.Contains(freeing, o.GetAllocationId()) {
				continue // given up while the TaskExecutor was lost, and being freed
			}
			if s := jm.slots[o.GetAllocationId()]; s != nil {
				resp.Accepted = append(resp.Accepted, o)
				continue
			}
			if len(jm.slots) >= needed {
				// Refused: the TaskExecutor frees it. Until its answers
				// no longer show the slot, and when the job ends, the
				// JobMaster frees it too, so the ResourceManager counts
				// it free once the job's result is written.
				setKey(&jm.dropped, o.GetAllocationId(), req.GetTaskExecutorId())
				continue
			}
			setKey(&jm.slots, o.GetAllocationId(), &slotRef{allocationID: o.GetAllocationId(), executor: req.GetTaskExecutorId(), index: int(o.GetSlotIndex()), ev: -1})
			resp.Accepted = append(resp.Accepted, o)
		}
		if !req.GetDeploymentsInAnswer() || len(resp.Accepted) == 0 || !jm.valid() {
			jm.deploy()
			return
		}
		// Attempts deployed into these slots go in the answer (see
		// submit), after those of an earlier answer to this offer that
		// no state confirmed yet.
		jm.answer = &offerAnswer{executor: req.GetTaskExecutorId(), slots: make(map[string]bool, len(resp.Accepted))}
		for _, o := range resp.Accepted {
			jm.answer.slots[o.GetAllocationId()] = true
		}
		jm.answerAgain()
		jm.deploy()
		resp.Deployments, jm.answer = jm.answer.tasks, nil
	}); err != nil {
		return nil, err
	}
	if refused != nil {
		return nil, refused
	}
	if len(resp.GetDeployments()) > 0 {
		// The deployments travel in the answer to the TaskExecutor's call:
		// their trace, the job's, goes beside the call's own.
		dctx, span := jobtrace.Start(context.Background(), jm.cfg.Trace, "jobplane.deploy", trace.WithAttributes(
			attribute.String("jobplane.job_id", jm.cfg.JobID), attribute.String("jobplane.task_executor_id", req.GetTaskExecutorId()),
			attribute.Int("jobplane.tasks", len(resp.GetDeployments())), attribute.Bool("jobplane.in_answer", true)))
		if info, ok := connect.CallInfoForHandlerContext(ctx); ok {
			jobtrace.SetDeployment(dctx, info.ResponseHeader())
		}
		span.End()
	}
	return resp, nil
}

// UpdateTaskExecutionState implements JobMasterServiceHandler.
func (r *Router) UpdateTaskExecutionState(ctx context.Context, req *clusterv1.UpdateTaskExecutionStateRequest) (*clusterv1.UpdateTaskExecutionStateResponse, error) {
	if req.GetStatus().GetAttempt() == nil {
		return nil, apierror.BadRequest(apierror.Field{Path: "status.attempt", Description: "required"})
	}
	jm, err := r.route(ctx, req.GetJobId(), req.GetJobMasterToken())
	if err != nil {
		return nil, err
	}
	var refused []error
	r.heard(req.GetTaskExecutorId())
	if err := jm.do(ctx, func() {
		refused = jm.update(req.GetTaskExecutorId(), req.GetStatus())
	}); err != nil {
		return nil, err
	}
	if refused[0] != nil {
		return nil, refused[0]
	}
	return &clusterv1.UpdateTaskExecutionStateResponse{}, nil
}

// UpdateTaskExecutionStates implements JobMasterServiceHandler: the
// changes are applied in order, in one event of the JobMaster.
func (r *Router) UpdateTaskExecutionStates(ctx context.Context, req *clusterv1.UpdateTaskExecutionStatesRequest) (*clusterv1.UpdateTaskExecutionStatesResponse, error) {
	var fields []apierror.Field
	for i, st := range req.GetStatuses() {
		if st.GetAttempt() == nil {
			fields = append(fields, apierror.Field{Path: fmt.Sprintf("statuses[%d].attempt", i), Description: "required"})
		}
	}
	if len(fields) > 0 {
		return nil, apierror.BadRequest(fields...)
	}
	jm, err := r.route(ctx, req.GetJobId(), req.GetJobMasterToken())
	if err != nil {
		return nil, err
	}
	var refused []error
	r.heard(req.GetTaskExecutorId())
	if err := jm.do(ctx, func() {
		refused = jm.update(req.GetTaskExecutorId(), req.GetStatuses()...)
	}); err != nil {
		return nil, err
	}
	resp := &clusterv1.UpdateTaskExecutionStatesResponse{}
	for i, err := range refused {
		if err != nil {
			resp.Refused = append(resp.Refused, apierror.Item(i, err))
		}
	}
	return resp, nil
}

// UpdateTaskExecutionStatesOfJobs implements JobMasterServiceHandler:
// each entry goes to its job's JobMaster as UpdateTaskExecutionStates
// would, queued with every JobMaster before any is waited for, so that one
// busy JobMaster does not hold back the others' entries.
func (r *Router) UpdateTaskExecutionStatesOfJobs(ctx context.Context, req *clusterv1.UpdateTaskExecutionStatesOfJobsRequest) (*clusterv1.UpdateTaskExecutionStatesOfJobsResponse, error) {
	var fields []apierror.Field
	if req.GetTaskExecutorId() == "" {
		fields = append(fields, apierror.Field{Path: "task_executor_id", Description: "required"})
	}
	for i, entry := range req.GetJobs() {
		if entry.GetJobId() == "" {
			fields = append(fields, apierror.Field{Path: fmt.Sprintf("jobs[%d].job_id", i), Description: "required"})
		}
		for k, st := range entry.GetStatuses() {
			if st.GetAttempt() == nil {
				fields = append(fields, apierror.Field{Path: fmt.Sprintf("jobs[%d].statuses[%d].attempt", i, k), Description: "required"})
			}
		}
	}
	if len(fields) > 0 {
		return nil, apierror.BadRequest(fields...)
	}
	executor := req.GetTaskExecutorId()
	r.heard(executor)
	resp := &clusterv1.UpdateTaskExecutionStatesOfJobsResponse{Results: make([]*clusterv1.UpdateTaskExecutionStatesResponse, len(req.GetJobs()))}
	refused := make([][]error, len(req.GetJobs()))
	waits := make([]func(context.Context) error, len(req.GetJobs()))
	for i, entry := range req.GetJobs() {
		resp.Results[i] = &clusterv1.UpdateTaskExecutionStatesResponse{}
		jm, err := r.route(ctx, entry.GetJobId(), entry.GetJobMasterToken())
		if err != nil {
			resp.Refused = append(resp.Refused, apierror.Item(i, err))
			continue
		}
		waits[i] = jm.begin(func() { refused[i] = jm.update(executor, entry.GetStatuses()...) })
	}
	for i, wait := range waits {
		if wait == nil {
			continue
		}
		if err := wait(ctx); err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			resp.Refused = append(resp.Refused, apierror.Item(i, err))
			continue
		}
		for k, err := range refused[i] {
			if err != nil {
				resp.Results[i].Refused = append(resp.Results[i].Refused, apierror.Item(k, err))
			}
		}
	}
	slices.SortFunc(resp.Refused, func(a, b *jobplanev1.ItemError) int { return int(a.GetIndex() - b.GetIndex()) })
	return resp, nil
}

// Heartbeat implements JobMasterServiceHandler.
func (r *Router) Heartbeat(ctx context.Context, req *clusterv1.JobMasterServiceHeartbeatRequest) (*clusterv1.JobMasterServiceHeartbeatResponse, error) {
	jm, err := r.route(ctx, req.GetJobId(), req.GetJobMasterToken())
	if err != nil {
		return nil, err
	}
	var refused error
	r.heard(req.GetTaskExecutorId())
	if err := jm.do(ctx, func() {
		if jm.executors[req.GetTaskExecutorId()] == nil {
			refused = notRegistered(req.GetJobId(), req.GetTaskExecutorId())
			return
		}
	}); err != nil {
		return nil, err
	}
	if refused != nil {
		return nil, refused
	}
	return &clusterv1.JobMasterServiceHeartbeatResponse{}, nil
}

// DisconnectTaskExecutor implements JobMasterServiceHandler: the attempts
// on the TaskExecutor fail and its slots are dropped.
func (r *Router) DisconnectTaskExecutor(ctx context.Context, req *clusterv1.DisconnectTaskExecutorRequest) (*clusterv1.DisconnectTaskExecutorResponse, error) {
	jm, err := r.route(ctx, req.GetJobId(), req.GetJobMasterToken())
	if err != nil {
		return nil, err
	}
	if err := jm.do(ctx, func() { jm.lostExecutor(req.GetTaskExecutorId(), req.GetReason()) }); err != nil {
		return nil, err
	}
	return &clusterv1.DisconnectTaskExecutorResponse{}, nil
}

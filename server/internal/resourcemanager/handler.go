package resourcemanager

import (
	"context"
	"slices"
	"strconv"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	"github.com/jobplane/jobplane/gen/jobplane/cluster/v1/clusterv1connect"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
	"github.com/jobplane/jobplane/server/internal/endpoint"
)

type handler struct {
	clusterv1connect.UnimplementedResourceManagerServiceHandler
	rm *ResourceManager
}

// checkLocked admits a call carrying the ResourceManager token t: refused
// as malformed, as stale if not ours, as not-leader if we do not lead or
// a newer leader exists.
func (rm *ResourceManager) checkLocked(t election.Token) error {
	switch {
	case t.SessionID == "" || t.Epoch == 0:
		return apierror.BadRequest(*apierror.TokenViolation("resource_manager_token", protoToken(t)))
	case !rm.leadingLocked() || t.Epoch > rm.token.Epoch:
		return apierror.NotLeader(election.JobManager, "")
	case t != rm.token:
		return apierror.StaleToken(election.JobManager, rm.token.SessionID, rm.token.Epoch)
	}
	return nil
}

// checkReceiverLocked admits a JobMaster's call carrying the token t of
// this ResourceManager, as RegisterJobMaster answered it: a newer one
// means this one was deposed; any other was meant for an earlier
// leadership, whose registrations this one does not have.
func (rm *ResourceManager) checkReceiverLocked(jobID string, t election.Token) error {
	switch {
	case t.SessionID == "" || t.Epoch == 0:
		return apierror.BadRequest(*apierror.TokenViolation("resource_manager_token", protoToken(t)))
	case !rm.leadingLocked() || t.Epoch > rm.token.Epoch:
		return apierror.NotLeader(election.JobManager, "")
	case t != rm.token:
		return apierror.New(jobplanev1.ErrorReason_ERROR_REASON_NOT_REGISTERED, "the call was meant for an earlier leadership of the ResourceManager; register again", map[string]string{"job_id": jobID})
	}
	return nil
}

// checkJobLocked admits a call carrying the JobMaster token t for jobID:
// refused as malformed, or as stale if a newer JobMaster of the job
// registered or the token is another grant's of the registered epoch.
func (rm *ResourceManager) checkJobLocked(jobID string, t election.Token) error {
	if t.SessionID == "" || t.Epoch == 0 {
		return apierror.BadRequest(*apierror.TokenViolation("job_master_token", protoToken(t)))
	}
	if !rm.leadingLocked() {
		return apierror.NotLeader(election.JobManager, "")
	}
	if j := rm.pool.jobs[jobID]; j != nil && (t.Epoch < j.token.Epoch || t.Epoch == j.token.Epoch && t != j.token) {
		return apierror.StaleToken(election.Job(jobID), j.token.SessionID, j.token.Epoch)
	}
	return nil
}

func (h *handler) RegisterTaskExecutor(ctx context.Context, req *clusterv1.ResourceManagerServiceRegisterTaskExecutorRequest) (*clusterv1.ResourceManagerServiceRegisterTaskExecutorResponse, error) {
	rm := h.rm
	var fields []apierror.Field
	if req.GetTaskExecutorId() == "" {
		fields = append(fields, apierror.Field{Path: "task_executor_id", Description: "required"})
	}
	if req.GetAddress() == "" {
		fields = append(fields, apierror.Field{Path: "address", Description: "required"})
	}
	if v := apierror.TokenViolation("resource_manager_token", req.GetResourceManagerToken()); v != nil {
		fields = append(fields, *v)
	}
	if len(fields) > 0 {
		return nil, apierror.BadRequest(fields...)
	}
	token := tokenOf(req.GetResourceManagerToken())
	rm.mu.Lock()
	err := rm.checkLocked(token)
	rm.mu.Unlock()
	if err != nil {
		return nil, err
	}
	// A member before it hears a word: nothing is deployed on it before.
	if err := rm.record(ctx, token, req.GetTaskExecutorId()); err != nil {
		return nil, err
	}
	var learnt []string
	defer func() { rm.held(learnt) }() // once unlocked
	rm.mu.Lock()
	defer rm.mu.Unlock()
	if err := rm.checkLocked(token); err != nil {
		return nil, err
	}
	e := &executor{
		id: req.GetTaskExecutorId(), address: req.GetAddress(), registrationID: newID(), heard: rm.judge.Heard(time.Now()),
		// Sorted and without repeats: the pool counts each name once.
		invokables: slices.Compact(slices.Sorted(slices.Values(req.GetInvokables()))),
		client:     clusterv1connect.NewTaskExecutorServiceClient(rm.cfg.HTTPClient, req.GetAddress(), endpoint.ClientOptions()...),
	}
	// Registering again starts over: what it holds now is in the report.
	rm.pool.addExecutor(e)
	learnt = rm.pool.applyReport(e, req.GetSlotReport(), 0, time.Now(), rm.grace())
	rm.poke()
	rm.log.Info("TaskExecutor registered", "task_executor", e.id, "address", e.address, "slots", e.slots)
	return &clusterv1.ResourceManagerServiceRegisterTaskExecutorResponse{
		RegistrationId:    e.registrationID,
		HeartbeatInterval: durationpb.New(rm.cfg.HeartbeatInterval),
		HeartbeatTimeout:  durationpb.New(rm.cfg.HeartbeatTimeout),
	}, nil
}

func (h *handler) Heartbeat(_ context.Context, req *clusterv1.ResourceManagerServiceHeartbeatRequest) (*clusterv1.ResourceManagerServiceHeartbeatResponse, error) {
	rm := h.rm
	var learnt []string
	defer func() { rm.held(learnt) }() // once unlocked
	rm.mu.Lock()
	defer rm.mu.Unlock()
	if err := rm.checkLocked(tokenOf(req.GetResourceManagerToken())); err != nil {
		return nil, err
	}
	e := rm.pool.executors[req.GetTaskExecutorId()]
	if e == nil || e.registrationID != req.GetRegistrationId() {
		return nil, apierror.New(jobplanev1.ErrorReason_ERROR_REASON_NOT_REGISTERED, "TaskExecutor is not registered",
			map[string]string{"task_executor_id": req.GetTaskExecutorId()})
	}
	e.heard = rm.judge.Heard(time.Now())
	// The report comes only when it changed (or always, without versions).
	if req.GetSlotReport() != nil {
		learnt = rm.pool.applyReport(e, req.GetSlotReport(), req.GetSlotReportVersion(), time.Now(), rm.grace())
		e.reportVersion = req.GetSlotReportVersion()
		rm.poke()
	}
	return &clusterv1.ResourceManagerServiceHeartbeatResponse{
		SlotReportVersion: e.reportVersion, JobMasters: rm.pool.jobMastersOwed(e),
	}, nil
}

func (h *handler) RegisterJobMaster(ctx context.Context, req *clusterv1.RegisterJobMasterRequest) (*clusterv1.RegisterJobMasterResponse, error) {
	rm := h.rm
	var fields []apierror.Field
	if req.GetJobId() == "" {
		fields = append(fields, apierror.Field{Path: "job_id", Description: "required"})
	}
	if req.GetJobMasterAddress() == "" {
		fields = append(fields, apierror.Field{Path: "job_master_address", Description: "required"})
	}
	if v := apierror.TokenViolation("job_master_token", req.GetJobMasterToken()); v != nil {
		fields = append(fields, *v)
	}
	if len(fields) > 0 {
		return nil, apierror.BadRequest(fields...)
	}
	token := tokenOf(req.GetJobMasterToken())
	rm.mu.Lock()
	err := rm.checkJobLocked(req.GetJobId(), token)
	registered := err == nil && rm.pool.jobs[req.GetJobId()] != nil && rm.pool.jobs[req.GetJobId()].token == token
	rm.mu.Unlock()
	if err != nil {
		return nil, err
	}
	// A token not registered yet (the job's first, or a newer one) must
	// be the job's current grant; the store says, once per registration.
	// The registered token was checked when it registered.
	if !registered {
		if err := rm.checkGrant(ctx, req.GetJobId(), token); err != nil {
			return nil, err
		}
	}
	rm.mu.Lock()
	defer rm.mu.Unlock()
	// A newer JobMaster may have registered while the store was read.
	if err := rm.checkJobLocked(req.GetJobId(), token); err != nil {
		return nil, err
	}
	rm.pool.registerJob(req.GetJobId(), token, req.GetJobMasterAddress())
	return &clusterv1.RegisterJobMasterResponse{ResourceManagerToken: protoToken(rm.token)}, nil
}

func (h *handler) DeclareResourceRequirements(_ context.Context, req *clusterv1.DeclareResourceRequirementsRequest) (*clusterv1.DeclareResourceRequirementsResponse, error) {
	rm := h.rm
	rm.mu.Lock()
	defer rm.mu.Unlock()
	token := tokenOf(req.GetJobMasterToken())
	if err := rm.checkReceiverLocked(req.GetJobId(), tokenOf(req.GetResourceManagerToken())); err != nil {
		return nil, err
	}
	if err := rm.checkJobLocked(req.GetJobId(), token); err != nil {
		return nil, err
	}
	j := rm.pool.jobs[req.GetJobId()]
	if j == nil || j.token != token {
		return nil, apierror.New(jobplanev1.ErrorReason_ERROR_REASON_NOT_REGISTERED, "JobMaster is not registered", map[string]string{"job_id": req.GetJobId()})
	}
	total := 0
	var invokables []string
	for i, r := range req.GetRequirements() {
		if r.GetSlots() < 0 {
			return nil, apierror.BadRequest(apierror.Field{Path: "requirements[" + strconv.Itoa(i) + "].slots", Description: "must not be negative"})
		}
		total += int(r.GetSlots())
		invokables = append(invokables, r.GetInvokables()...)
	}
	rm.pool.declare(req.GetJobId(), total, invokables)
	rm.poke()
	return &clusterv1.DeclareResourceRequirementsResponse{}, nil
}

func (h *handler) DisconnectJobMaster(_ context.Context, req *clusterv1.DisconnectJobMasterRequest) (*clusterv1.DisconnectJobMasterResponse, error) {
	rm := h.rm
	rm.mu.Lock()
	defer rm.mu.Unlock()
	token := tokenOf(req.GetJobMasterToken())
	if err := rm.checkReceiverLocked(req.GetJobId(), tokenOf(req.GetResourceManagerToken())); err != nil {
		return nil, err
	}
	if err := rm.checkJobLocked(req.GetJobId(), token); err != nil {
		return nil, err
	}
	if j := rm.pool.jobs[req.GetJobId()]; j != nil && j.token == token {
		delete(rm.pool.jobs, req.GetJobId())
	}
	// Slots the JobMaster freed at their TaskExecutors are free now, not
	// at the TaskExecutors' next slot reports: the next job need not wait.
	for _, aid := range req.GetFreedAllocationIds() {
		if a := rm.pool.allocations[aid]; a != nil && a.jobID == req.GetJobId() {
			rm.pool.removeAllocation(aid)
			rm.pool.freed[aid] = a.executor
			rm.poke()
		}
	}
	return &clusterv1.DisconnectJobMasterResponse{}, nil
}

// held passes the jobs of allocations learnt from a report to
// Config.OnHeld; rm.mu must not be held.
func (rm *ResourceManager) held(jobIDs []string) {
	if len(jobIDs) > 0 && rm.cfg.OnHeld != nil {
		rm.cfg.OnHeld(jobIDs)
	}
}

package taskexecutor

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/trace"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	"github.com/jobplane/jobplane/gen/jobplane/cluster/v1/clusterv1connect"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
	"github.com/jobplane/jobplane/sdk/wire/jobstatus"
)

// handler serves TaskExecutorService for a TaskExecutor.
type handler struct {
	clusterv1connect.UnimplementedTaskExecutorServiceHandler
	te *TaskExecutor
}

func staleJob(jobID string, current election.Token) error {
	return apierror.StaleToken(election.Job(jobID), current.SessionID, current.Epoch)
}

// slotFields lists the fields of a slot request that are missing, or out
// of range, under prefix.
func (te *TaskExecutor) slotFields(prefix string, r *clusterv1.SlotRequest) []apierror.Field {
	var fs []apierror.Field
	for _, f := range []struct {
		name  string
		empty bool
	}{
		{"allocation_id", r.GetAllocationId() == ""},
		{"job_id", r.GetJobId() == ""},
		{"job_master_address", r.GetJobMasterAddress() == ""},
		{"job_master_token", r.GetJobMasterToken().GetEpoch() == 0},
	} {
		if f.empty {
			fs = append(fs, apierror.Field{Path: prefix + f.name, Description: "required"})
		}
	}
	if i := int(r.GetSlotIndex()); i < 0 || i >= len(te.slots) {
		fs = append(fs, apierror.Field{Path: prefix + "slot_index", Description: fmt.Sprintf("%d is out of range [0, %d)", i, len(te.slots))})
	}
	return fs
}

func (h *handler) RequestSlot(ctx context.Context, req *clusterv1.RequestSlotRequest) (*clusterv1.RequestSlotResponse, error) {
	te := h.te
	r := &clusterv1.SlotRequest{
		SlotIndex: req.GetSlotIndex(), AllocationId: req.GetAllocationId(), JobId: req.GetJobId(),
		JobMasterAddress: req.GetJobMasterAddress(), JobMasterToken: req.GetJobMasterToken(), Profile: req.GetProfile(),
	}
	fields := te.slotFields("", r)
	if req.GetResourceManagerToken().GetEpoch() == 0 {
		fields = append([]apierror.Field{{Path: "resource_manager_token", Description: "required"}}, fields...)
	}
	if len(fields) > 0 {
		return nil, apierror.BadRequest(fields...)
	}
	if err := te.rm.check(ctx, tokenOf(req.GetResourceManagerToken())); err != nil {
		return nil, err
	}
	te.mu.Lock()
	defer te.mu.Unlock()
	if err := te.allocateLocked(r); err != nil {
		return nil, err
	}
	return &clusterv1.RequestSlotResponse{SlotReportVersion: te.slotVersion}, nil
}

func (h *handler) RequestSlots(ctx context.Context, req *clusterv1.RequestSlotsRequest) (*clusterv1.RequestSlotsResponse, error) {
	te := h.te
	var fields []apierror.Field
	if req.GetResourceManagerToken().GetEpoch() == 0 {
		fields = append(fields, apierror.Field{Path: "resource_manager_token", Description: "required"})
	}
	for i, r := range req.GetSlots() {
		fields = append(fields, te.slotFields(fmt.Sprintf("slots[%d].", i), r)...)
	}
	if len(fields) > 0 {
		return nil, apierror.BadRequest(fields...)
	}
	if err := te.rm.check(ctx, tokenOf(req.GetResourceManagerToken())); err != nil {
		return nil, err
	}
	resp := &clusterv1.RequestSlotsResponse{}
	te.mu.Lock()
	defer te.mu.Unlock()
	for i, r := range req.GetSlots() {
		if err := te.allocateLocked(r); err != nil {
			resp.Refused = append(resp.Refused, apierror.Item(i, err))
		}
	}
	resp.SlotReportVersion = te.slotVersion
	return resp, nil
}

// allocateLocked allocates a slot as RequestSlot does, and queues its offer
// to the job's JobMaster; te.mu must be held and r validated.
func (te *TaskExecutor) allocateLocked(r *clusterv1.SlotRequest) error {
	s := te.slots[r.GetSlotIndex()]
	switch s.allocationID {
	case r.GetAllocationId():
		return nil
	case "":
	default:
		return apierror.New(jobplanev1.ErrorReason_ERROR_REASON_SLOT_OCCUPIED, "slot is allocated to another allocation", map[string]string{
			"task_executor_id": te.cfg.ID, "slot_index": fmt.Sprint(s.index), "allocation_id": s.allocationID,
		})
	}
	jmToken := tokenOf(r.GetJobMasterToken())
	current, ok := te.adoptLocked(r.GetJobId(), jmToken, r.GetJobMasterAddress())
	if !ok {
		return staleJob(r.GetJobId(), current)
	}
	s.allocationID, s.jobID = r.GetAllocationId(), r.GetJobId()
	te.holdLocked(r.GetJobId())
	te.slotVersion++
	te.queueOfferLocked(jobMasterKey{jobID: r.GetJobId(), address: r.GetJobMasterAddress(), token: jmToken}, s.index, s.allocationID)
	return nil
}

func sameAttempt(a, b *jobplanev1.ExecutionAttemptId) bool {
	return a.GetVertexId() == b.GetVertexId() && a.GetSubtaskIndex() == b.GetSubtaskIndex() && a.GetAttemptNumber() == b.GetAttemptNumber()
}

// taskFields lists the fields of a deployment that are missing, under
// prefix.
func taskFields(prefix string, allocationID string, attempt *jobplanev1.ExecutionAttemptId, invokable string) []apierror.Field {
	var fs []apierror.Field
	for _, f := range []struct {
		name  string
		empty bool
	}{
		{"allocation_id", allocationID == ""},
		{"attempt", attempt == nil},
		{"invokable", invokable == ""},
	} {
		if f.empty {
			fs = append(fs, apierror.Field{Path: prefix + f.name, Description: "required"})
		}
	}
	return fs
}

// jobFields lists the job id and JobMaster token if missing.
func jobFields(jobID string, token *jobplanev1.FencingToken) []apierror.Field {
	var fs []apierror.Field
	if jobID == "" {
		fs = append(fs, apierror.Field{Path: "job_id", Description: "required"})
	}
	if token.GetEpoch() == 0 {
		fs = append(fs, apierror.Field{Path: "job_master_token", Description: "required"})
	}
	return fs
}

func (h *handler) SubmitTask(ctx context.Context, req *clusterv1.SubmitTaskRequest) (*clusterv1.SubmitTaskResponse, error) {
	te := h.te
	fields := jobFields(req.GetJobId(), req.GetJobMasterToken())
	fields = append(fields, taskFields("", req.GetAllocationId(), req.GetAttempt(), req.GetInvokable())...)
	if len(fields) > 0 {
		return nil, apierror.BadRequest(fields...)
	}
	token := tokenOf(req.GetJobMasterToken())
	te.mu.Lock()
	defer te.mu.Unlock()
	if err := te.checkJobLocked(ctx, req.GetJobId(), token); err != nil {
		return nil, err
	}
	if err := te.followDeploymentLocked(req.GetJobId(), token, req.GetHeartbeatTimeout().AsDuration(), req.GetTaskLease().AsDuration()); err != nil {
		return nil, err
	}
	if err := te.deployLocked(ctx, req, token); err != nil {
		return nil, err
	}
	return &clusterv1.SubmitTaskResponse{}, nil
}

func (h *handler) SubmitTasks(ctx context.Context, req *clusterv1.SubmitTasksRequest) (*clusterv1.SubmitTasksResponse, error) {
	te := h.te
	fields := jobFields(req.GetJobId(), req.GetJobMasterToken())
	for i, d := range req.GetTasks() {
		fields = append(fields, taskFields(fmt.Sprintf("tasks[%d].", i), d.GetAllocationId(), d.GetAttempt(), d.GetInvokable())...)
	}
	if len(fields) > 0 {
		return nil, apierror.BadRequest(fields...)
	}
	token := tokenOf(req.GetJobMasterToken())
	resp := &clusterv1.SubmitTasksResponse{}
	te.mu.Lock()
	defer te.mu.Unlock()
	if err := te.checkJobLocked(ctx, req.GetJobId(), token); err != nil {
		return nil, err
	}
	if err := te.followDeploymentLocked(req.GetJobId(), token, req.GetHeartbeatTimeout().AsDuration(), req.GetTaskLease().AsDuration()); err != nil {
		return nil, err
	}
	for i, d := range req.GetTasks() {
		if err := te.deployLocked(ctx, submitTaskRequest(req.GetJobId(), req.GetJobMasterToken(), d), token); err != nil {
			resp.Refused = append(resp.Refused, apierror.Item(i, err))
		}
	}
	return resp, nil
}

// submitTaskRequest is the SubmitTask that one deployment of a batch
// stands for.
func submitTaskRequest(jobID string, token *jobplanev1.FencingToken, d *clusterv1.TaskDeployment) *clusterv1.SubmitTaskRequest {
	return &clusterv1.SubmitTaskRequest{
		JobId: jobID, JobMasterToken: token, AllocationId: d.GetAllocationId(),
		Attempt: d.GetAttempt(), TaskName: d.GetTaskName(), Invokable: d.GetInvokable(),
		Config: d.GetConfig(), NumberOfSubtasks: d.GetNumberOfSubtasks(),
		RestoredState: d.GetRestoredState(), RestoredFrom: d.GetRestoredFrom(),
	}
}

// followLocked admits a call from the job's JobMaster of token: refused
// as stale if the job has a newer one (a newer token becomes the job's),
// and taken only once the job's tasks stopped if its deadline passed
// (admitLocked). te.mu must be held.
func (te *TaskExecutor) followLocked(jobID string, token election.Token) error {
	current, ok := te.adoptLocked(jobID, token, "")
	if !ok {
		return staleJob(jobID, current)
	}
	te.admitLocked(jobID, token)
	return nil
}

// deployLocked deploys one attempt as SubmitTask does, once its
// JobMaster's token was admitted (followDeploymentLocked); te.mu must be
// held and req validated. The attempt's span is a child of the span in
// traced (the deployment's), if any.
func (te *TaskExecutor) deployLocked(traced context.Context, req *clusterv1.SubmitTaskRequest, token election.Token) error {
	var s *slot
	for _, cand := range te.slots {
		if cand.allocationID == req.GetAllocationId() && cand.jobID == req.GetJobId() {
			s = cand
		}
	}
	if s == nil {
		return apierror.New(jobplanev1.ErrorReason_ERROR_REASON_SLOT_NOT_ALLOCATED, "no slot is allocated to this job under this allocation",
			map[string]string{"allocation_id": req.GetAllocationId(), "job_id": req.GetJobId()})
	}
	if t := s.task; t != nil {
		if sameAttempt(t.req.GetAttempt(), req.GetAttempt()) && t.token == token {
			return nil
		}
		// An attempt whose terminal state is decided (and being reported)
		// no longer holds the slot.
		if !jobstatus.IsExecTerminal(t.state) {
			return apierror.New(jobplanev1.ErrorReason_ERROR_REASON_SLOT_OCCUPIED, "another attempt still runs in the slot", map[string]string{
				"task_executor_id": te.cfg.ID, "slot_index": fmt.Sprint(s.index), "allocation_id": s.allocationID,
			})
		}
	}
	if te.jobs[req.GetJobId()].timeout <= 0 {
		// The watchdog could not stop the attempt should the JobMaster
		// fall silent.
		return apierror.New(jobplanev1.ErrorReason_ERROR_REASON_NOT_REGISTERED,
			"no heartbeat timeout is known for the job's JobMaster: it registers this TaskExecutor (or takes an offer with its address) or names its timeout in the deployment",
			map[string]string{"job_id": req.GetJobId(), "task_executor_id": te.cfg.ID})
	}
	inv, ok := te.invokables[req.GetInvokable()]
	if !ok {
		msg := fmt.Sprintf("no invokable %q is registered on TaskExecutor %s", req.GetInvokable(), te.cfg.ID)
		if req.GetInvokable() == "exec" {
			msg += execNotAllowed
		}
		return apierror.New(jobplanev1.ErrorReason_ERROR_REASON_UNKNOWN_INVOKABLE, msg, map[string]string{"invokable": req.GetInvokable()})
	}
	ctx, cancel := context.WithCancel(te.ctx)
	if sc := trace.SpanContextFromContext(traced); sc.IsValid() {
		ctx = trace.ContextWithSpanContext(ctx, sc)
	}
	t := &task{
		req: req, token: token, deployed: token, address: te.jobs[req.GetJobId()].address,
		cancel: cancel, state: jobplanev1.ExecutionState_EXECUTION_STATE_DEPLOYING, done: make(chan struct{}), ctx: ctx,
	}
	s.task = t
	te.goRunLocked(func() {
		defer cancel()
		te.runTask(ctx, t, inv)
	})
	return nil
}

func (h *handler) CancelTask(ctx context.Context, req *clusterv1.CancelTaskRequest) (*clusterv1.CancelTaskResponse, error) {
	te := h.te
	te.mu.Lock()
	defer te.mu.Unlock()
	if err := te.checkJobLocked(ctx, req.GetJobId(), tokenOf(req.GetJobMasterToken())); err != nil {
		return nil, err
	}
	if err := te.followLocked(req.GetJobId(), tokenOf(req.GetJobMasterToken())); err != nil {
		return nil, err
	}
	for _, s := range te.slots {
		if s.jobID == req.GetJobId() && s.task != nil && sameAttempt(s.task.req.GetAttempt(), req.GetAttempt()) {
			s.task.cancel()
		}
	}
	return &clusterv1.CancelTaskResponse{}, nil
}

func (h *handler) FreeSlot(ctx context.Context, req *clusterv1.FreeSlotRequest) (*clusterv1.FreeSlotResponse, error) {
	te := h.te
	te.mu.Lock()
	defer te.mu.Unlock()
	if err := te.checkJobLocked(ctx, req.GetJobId(), tokenOf(req.GetJobMasterToken())); err != nil {
		return nil, err
	}
	if err := te.followLocked(req.GetJobId(), tokenOf(req.GetJobMasterToken())); err != nil {
		return nil, err
	}
	te.freeLocked(req.GetJobId(), req.GetAllocationId())
	return &clusterv1.FreeSlotResponse{}, nil
}

func (h *handler) FreeSlots(ctx context.Context, req *clusterv1.FreeSlotsRequest) (*clusterv1.FreeSlotsResponse, error) {
	te := h.te
	if fields := jobFields(req.GetJobId(), req.GetJobMasterToken()); len(fields) > 0 {
		return nil, apierror.BadRequest(fields...)
	}
	te.mu.Lock()
	defer te.mu.Unlock()
	if err := te.checkJobLocked(ctx, req.GetJobId(), tokenOf(req.GetJobMasterToken())); err != nil {
		return nil, err
	}
	if err := te.followLocked(req.GetJobId(), tokenOf(req.GetJobMasterToken())); err != nil {
		return nil, err
	}
	for _, aid := range req.GetAllocationIds() {
		te.freeLocked(req.GetJobId(), aid)
	}
	return &clusterv1.FreeSlotsResponse{}, nil
}

// freeLocked frees the job's slot of an allocation, if held here; te.mu
// must be held.
func (te *TaskExecutor) freeLocked(jobID, allocationID string) {
	for _, s := range te.slots {
		if s.allocationID == allocationID && s.jobID == jobID {
			te.releaseLocked(s, "")
		}
	}
}

func (h *handler) Heartbeat(ctx context.Context, req *clusterv1.TaskExecutorServiceHeartbeatRequest) (*clusterv1.TaskExecutorServiceHeartbeatResponse, error) {
	te := h.te
	var jobID string
	var token election.Token
	switch s := req.GetSender().(type) {
	case *clusterv1.TaskExecutorServiceHeartbeatRequest_ResourceManagerToken:
		token = tokenOf(s.ResourceManagerToken)
		if err := te.rm.check(ctx, token); err != nil {
			return nil, err
		}
	case *clusterv1.TaskExecutorServiceHeartbeatRequest_JobMaster:
		jobID, token = s.JobMaster.GetJobId(), tokenOf(s.JobMaster.GetToken())
		if jobID == "" {
			return nil, apierror.BadRequest(apierror.Field{Path: "job_master.job_id", Description: "required"})
		}
	default:
		return nil, apierror.BadRequest(apierror.Field{Path: "sender", Description: "required"})
	}
	te.mu.Lock()
	defer te.mu.Unlock()
	if jobID != "" {
		if err := te.checkJobLocked(ctx, jobID, token); err != nil {
			return nil, err
		}
		current, ok := te.adoptLocked(jobID, token, "")
		if !ok {
			return nil, staleJob(jobID, current)
		}
		te.admitLocked(jobID, token)
	}
	resp := &clusterv1.TaskExecutorServiceHeartbeatResponse{TaskExecutorId: te.cfg.ID, SlotReport: te.slotReportLocked()}
	if jobID != "" {
		for _, s := range te.slots {
			if s.jobID == jobID && s.task != nil && s.task.token == token {
				resp.Tasks = append(resp.Tasks, &jobplanev1.TaskExecutionStatus{Attempt: s.task.req.GetAttempt(), State: s.task.state, FailureMessage: s.task.failure})
			}
		}
	}
	return resp, nil
}

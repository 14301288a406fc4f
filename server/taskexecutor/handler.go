package taskexecutor

import (
	"context"
	"fmt"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/internal/apierror"
	"github.com/jobplane/jobplane/server/internal/jobstatus"
)

// handler serves TaskExecutorService for a TaskExecutor.
type handler struct {
	jobplanev1connect.UnimplementedTaskExecutorServiceHandler
	te *TaskExecutor
}

func staleJob(jobID string, current hastore.Token) error {
	return apierror.StaleToken(hastore.JobElection(jobID), current.SessionID, current.Epoch)
}

func missing(fields ...string) error {
	var fs []apierror.Field
	for _, f := range fields {
		fs = append(fs, apierror.Field{Path: f, Description: "required"})
	}
	return apierror.BadRequest(fs...)
}

func (h *handler) RequestSlot(_ context.Context, req *jobplanev1.RequestSlotRequest) (*jobplanev1.RequestSlotResponse, error) {
	te := h.te
	var absent []string
	for field, empty := range map[string]bool{
		"resource_manager_token": req.GetResourceManagerToken().GetEpoch() == 0,
		"allocation_id":          req.GetAllocationId() == "",
		"job_id":                 req.GetJobId() == "",
		"job_master_address":     req.GetJobMasterAddress() == "",
		"job_master_token":       req.GetJobMasterToken().GetEpoch() == 0,
	} {
		if empty {
			absent = append(absent, field)
		}
	}
	if len(absent) > 0 {
		return nil, missing(absent...)
	}
	if i := int(req.GetSlotIndex()); i < 0 || i >= len(te.slots) {
		return nil, apierror.BadRequest(apierror.Field{Path: "slot_index", Description: fmt.Sprintf("%d is out of range [0, %d)", i, len(te.slots))})
	}
	if newest, ok := te.rmToken.check(tokenOf(req.GetResourceManagerToken())); !ok {
		return nil, apierror.StaleToken(hastore.ElectionJobManager, newest.SessionID, newest.Epoch)
	}
	jmToken := tokenOf(req.GetJobMasterToken())
	te.mu.Lock()
	s := te.slots[req.GetSlotIndex()]
	switch s.allocationID {
	case req.GetAllocationId():
		version := te.slotVersion
		te.mu.Unlock()
		return &jobplanev1.RequestSlotResponse{SlotReportVersion: version}, nil
	case "":
	default:
		holder := s.allocationID
		te.mu.Unlock()
		return nil, apierror.New(jobplanev1.ErrorReason_ERROR_REASON_SLOT_OCCUPIED, "slot is allocated to another allocation", map[string]string{
			"task_executor_id": te.cfg.ID, "slot_index": fmt.Sprint(s.index), "allocation_id": holder,
		})
	}
	current, ok := te.adoptLocked(req.GetJobId(), jmToken, req.GetJobMasterAddress())
	if !ok {
		te.mu.Unlock()
		return nil, staleJob(req.GetJobId(), current)
	}
	s.allocationID, s.jobID = req.GetAllocationId(), req.GetJobId()
	te.slotVersion++
	version := te.slotVersion
	ctx := te.ctx
	te.goRunLocked(func() {
		te.offer(ctx, req.GetJobId(), req.GetJobMasterAddress(), jmToken, int(req.GetSlotIndex()), req.GetAllocationId())
	})
	te.mu.Unlock()
	return &jobplanev1.RequestSlotResponse{SlotReportVersion: version}, nil
}

func sameAttempt(a, b *jobplanev1.ExecutionAttemptId) bool {
	return a.GetVertexId() == b.GetVertexId() && a.GetSubtaskIndex() == b.GetSubtaskIndex() && a.GetAttemptNumber() == b.GetAttemptNumber()
}

func (h *handler) SubmitTask(_ context.Context, req *jobplanev1.SubmitTaskRequest) (*jobplanev1.SubmitTaskResponse, error) {
	te := h.te
	var absent []string
	if req.GetJobId() == "" {
		absent = append(absent, "job_id")
	}
	if req.GetJobMasterToken().GetEpoch() == 0 {
		absent = append(absent, "job_master_token")
	}
	if req.GetAllocationId() == "" {
		absent = append(absent, "allocation_id")
	}
	if req.GetAttempt() == nil {
		absent = append(absent, "attempt")
	}
	if req.GetInvokable() == "" {
		absent = append(absent, "invokable")
	}
	if len(absent) > 0 {
		return nil, missing(absent...)
	}
	token := tokenOf(req.GetJobMasterToken())
	te.mu.Lock()
	defer te.mu.Unlock()
	current, ok := te.adoptLocked(req.GetJobId(), token, "")
	if !ok {
		return nil, staleJob(req.GetJobId(), current)
	}
	te.touchLocked(req.GetJobId(), token, time.Now())
	var s *slot
	for _, cand := range te.slots {
		if cand.allocationID == req.GetAllocationId() && cand.jobID == req.GetJobId() {
			s = cand
		}
	}
	if s == nil {
		return nil, apierror.New(jobplanev1.ErrorReason_ERROR_REASON_SLOT_NOT_ALLOCATED, "no slot is allocated to this job under this allocation",
			map[string]string{"allocation_id": req.GetAllocationId(), "job_id": req.GetJobId()})
	}
	if t := s.task; t != nil {
		if sameAttempt(t.req.GetAttempt(), req.GetAttempt()) && t.token == token {
			return &jobplanev1.SubmitTaskResponse{}, nil
		}
		// An attempt whose terminal state is decided (and being reported)
		// no longer holds the slot.
		if !jobstatus.IsExecTerminal(t.state) {
			return nil, apierror.New(jobplanev1.ErrorReason_ERROR_REASON_SLOT_OCCUPIED, "another attempt still runs in the slot", map[string]string{
				"task_executor_id": te.cfg.ID, "slot_index": fmt.Sprint(s.index), "allocation_id": s.allocationID,
			})
		}
	}
	inv, ok := te.invokables[req.GetInvokable()]
	if !ok {
		return nil, apierror.New(jobplanev1.ErrorReason_ERROR_REASON_UNKNOWN_INVOKABLE,
			fmt.Sprintf("no invokable %q is registered on TaskExecutor %s", req.GetInvokable(), te.cfg.ID),
			map[string]string{"invokable": req.GetInvokable()})
	}
	ctx, cancel := context.WithCancel(te.ctx)
	t := &task{req: req, token: token, cancel: cancel, state: jobplanev1.ExecutionState_EXECUTION_STATE_DEPLOYING, done: make(chan struct{})}
	s.task = t
	address := te.jobs[req.GetJobId()].address
	te.goRunLocked(func() {
		defer cancel()
		te.runTask(ctx, t, inv, address)
	})
	return &jobplanev1.SubmitTaskResponse{}, nil
}

func (h *handler) CancelTask(_ context.Context, req *jobplanev1.CancelTaskRequest) (*jobplanev1.CancelTaskResponse, error) {
	te := h.te
	te.mu.Lock()
	defer te.mu.Unlock()
	token := tokenOf(req.GetJobMasterToken())
	current, ok := te.adoptLocked(req.GetJobId(), token, "")
	if !ok {
		return nil, staleJob(req.GetJobId(), current)
	}
	te.touchLocked(req.GetJobId(), token, time.Now())
	for _, s := range te.slots {
		if s.jobID == req.GetJobId() && s.task != nil && sameAttempt(s.task.req.GetAttempt(), req.GetAttempt()) {
			s.task.cancel()
		}
	}
	return &jobplanev1.CancelTaskResponse{}, nil
}

func (h *handler) FreeSlot(_ context.Context, req *jobplanev1.FreeSlotRequest) (*jobplanev1.FreeSlotResponse, error) {
	te := h.te
	te.mu.Lock()
	defer te.mu.Unlock()
	token := tokenOf(req.GetJobMasterToken())
	current, ok := te.adoptLocked(req.GetJobId(), token, "")
	if !ok {
		return nil, staleJob(req.GetJobId(), current)
	}
	te.touchLocked(req.GetJobId(), token, time.Now())
	for _, s := range te.slots {
		if s.allocationID == req.GetAllocationId() && s.jobID == req.GetJobId() {
			te.releaseLocked(s, "")
		}
	}
	return &jobplanev1.FreeSlotResponse{}, nil
}

func (h *handler) Heartbeat(_ context.Context, req *jobplanev1.TaskExecutorServiceHeartbeatRequest) (*jobplanev1.TaskExecutorServiceHeartbeatResponse, error) {
	te := h.te
	token := tokenOf(req.GetToken())
	if req.GetJobId() == "" {
		if newest, ok := te.rmToken.check(token); !ok {
			return nil, apierror.StaleToken(hastore.ElectionJobManager, newest.SessionID, newest.Epoch)
		}
	}
	te.mu.Lock()
	defer te.mu.Unlock()
	if req.GetJobId() != "" {
		current, ok := te.adoptLocked(req.GetJobId(), token, "")
		if !ok {
			return nil, staleJob(req.GetJobId(), current)
		}
		te.touchLocked(req.GetJobId(), token, time.Now())
	}
	resp := &jobplanev1.TaskExecutorServiceHeartbeatResponse{TaskExecutorId: te.cfg.ID, SlotReport: te.slotReportLocked()}
	if req.GetJobId() != "" {
		for _, s := range te.slots {
			if s.jobID == req.GetJobId() && s.task != nil && s.task.token == token {
				resp.Tasks = append(resp.Tasks, &jobplanev1.TaskExecutionStatus{Attempt: s.task.req.GetAttempt(), State: s.task.state, FailureMessage: s.task.failure})
			}
		}
	}
	return resp, nil
}

package jobmaster

import (
	"context"
	"sync"

	"google.golang.org/protobuf/types/known/durationpb"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/internal/apierror"
)

// Router serves JobMasterService for every JobMaster of a process,
// routing each call by its job id to the JobMaster that currently runs the
// job here.
type Router struct {
	jobplanev1connect.UnimplementedJobMasterServiceHandler

	// LeaderAddress, if set, tells where a job's JobMaster runs, for
	// NOT_LEADER answers about jobs not run here.
	LeaderAddress func(ctx context.Context, jobID string) string

	mu      sync.Mutex
	masters map[string]*JobMaster
}

// NewRouter returns an empty Router.
func NewRouter() *Router { return &Router{masters: make(map[string]*JobMaster)} }

// Add routes jobID's calls to jm.
func (r *Router) Add(jobID string, jm *JobMaster) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.masters[jobID] = jm
}

// Remove stops routing jobID's calls to jm (if it is still the one).
func (r *Router) Remove(jobID string, jm *JobMaster) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.masters[jobID] == jm {
		delete(r.masters, jobID)
	}
}

// route finds the JobMaster for a call and checks its token: an older
// token is stale, a newer one means this JobMaster was deposed.
func (r *Router) route(ctx context.Context, jobID string, t *jobplanev1.FencingToken) (*JobMaster, error) {
	r.mu.Lock()
	jm := r.masters[jobID]
	r.mu.Unlock()
	token := hastore.Token{SessionID: t.GetSessionId(), Epoch: t.GetEpoch()}
	switch {
	case jm == nil || token.Epoch > jm.cfg.Token.Epoch || !jm.valid():
		addr := ""
		if r.LeaderAddress != nil {
			addr = r.LeaderAddress(ctx, jobID)
		}
		return nil, apierror.NotLeader(hastore.JobElection(jobID), addr)
	case token != jm.cfg.Token:
		return nil, apierror.StaleToken(hastore.JobElection(jobID), jm.cfg.Token.SessionID, jm.cfg.Token.Epoch)
	}
	return jm, nil
}

// RegisterTaskExecutor implements JobMasterServiceHandler.
func (r *Router) RegisterTaskExecutor(ctx context.Context, req *jobplanev1.JobMasterServiceRegisterTaskExecutorRequest) (*jobplanev1.JobMasterServiceRegisterTaskExecutorResponse, error) {
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
	return &jobplanev1.JobMasterServiceRegisterTaskExecutorResponse{
		HeartbeatInterval: durationpb.New(jm.cfg.HeartbeatInterval), HeartbeatTimeout: durationpb.New(jm.cfg.HeartbeatTimeout),
	}, nil
}

func notRegistered(jobID, executor string) error {
	return apierror.New(jobplanev1.ErrorReason_ERROR_REASON_NOT_REGISTERED, "TaskExecutor is not registered with the JobMaster",
		map[string]string{"job_id": jobID, "task_executor_id": executor})
}

// OfferSlots implements JobMasterServiceHandler.
func (r *Router) OfferSlots(ctx context.Context, req *jobplanev1.OfferSlotsRequest) (*jobplanev1.OfferSlotsResponse, error) {
	jm, err := r.route(ctx, req.GetJobId(), req.GetJobMasterToken())
	if err != nil {
		return nil, err
	}
	resp := &jobplanev1.OfferSlotsResponse{}
	var refused error
	if err := jm.do(ctx, func() {
		if jm.executors[req.GetTaskExecutorId()] == nil {
			refused = notRegistered(req.GetJobId(), req.GetTaskExecutorId())
			return
		}
		jm.heardFrom(req.GetTaskExecutorId())
		needed := jm.neededLocked()
		for _, o := range req.GetOffers() {
			if s := jm.slots[o.GetAllocationId()]; s != nil {
				resp.Accepted = append(resp.Accepted, o)
				continue
			}
			if len(jm.slots) >= needed {
				// Refused: the TaskExecutor frees it. Until its answers
				// no longer show the slot, and when the job ends, the
				// JobMaster frees it too, so the ResourceManager counts
				// it free once the job's result is written.
				jm.dropped[o.GetAllocationId()] = req.GetTaskExecutorId()
				continue
			}
			jm.slots[o.GetAllocationId()] = &slotRef{allocationID: o.GetAllocationId(), executor: req.GetTaskExecutorId(), index: int(o.GetSlotIndex()), ev: -1}
			resp.Accepted = append(resp.Accepted, o)
		}
		jm.deploy()
	}); err != nil {
		return nil, err
	}
	if refused != nil {
		return nil, refused
	}
	return resp, nil
}

// UpdateTaskExecutionState implements JobMasterServiceHandler.
func (r *Router) UpdateTaskExecutionState(ctx context.Context, req *jobplanev1.UpdateTaskExecutionStateRequest) (*jobplanev1.UpdateTaskExecutionStateResponse, error) {
	if req.GetStatus().GetAttempt() == nil {
		return nil, apierror.BadRequest(apierror.Field{Path: "status.attempt", Description: "required"})
	}
	jm, err := r.route(ctx, req.GetJobId(), req.GetJobMasterToken())
	if err != nil {
		return nil, err
	}
	var refused error
	if err := jm.do(ctx, func() {
		jm.heardFrom(req.GetTaskExecutorId())
		refused = jm.update(req.GetTaskExecutorId(), req.GetStatus())
	}); err != nil {
		return nil, err
	}
	if refused != nil {
		return nil, refused
	}
	return &jobplanev1.UpdateTaskExecutionStateResponse{}, nil
}

// Heartbeat implements JobMasterServiceHandler.
func (r *Router) Heartbeat(ctx context.Context, req *jobplanev1.JobMasterServiceHeartbeatRequest) (*jobplanev1.JobMasterServiceHeartbeatResponse, error) {
	jm, err := r.route(ctx, req.GetJobId(), req.GetJobMasterToken())
	if err != nil {
		return nil, err
	}
	var refused error
	if err := jm.do(ctx, func() {
		if jm.executors[req.GetTaskExecutorId()] == nil {
			refused = notRegistered(req.GetJobId(), req.GetTaskExecutorId())
			return
		}
		jm.heardFrom(req.GetTaskExecutorId())
	}); err != nil {
		return nil, err
	}
	if refused != nil {
		return nil, refused
	}
	return &jobplanev1.JobMasterServiceHeartbeatResponse{}, nil
}

// DisconnectTaskExecutor implements JobMasterServiceHandler: the attempts
// on the TaskExecutor fail and its slots are dropped.
func (r *Router) DisconnectTaskExecutor(ctx context.Context, req *jobplanev1.DisconnectTaskExecutorRequest) (*jobplanev1.DisconnectTaskExecutorResponse, error) {
	jm, err := r.route(ctx, req.GetJobId(), req.GetJobMasterToken())
	if err != nil {
		return nil, err
	}
	if err := jm.do(ctx, func() { jm.lostExecutor(req.GetTaskExecutorId(), req.GetReason()) }); err != nil {
		return nil, err
	}
	return &jobplanev1.DisconnectTaskExecutorResponse{}, nil
}

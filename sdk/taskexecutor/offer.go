package taskexecutor

import (
	"context"
	"time"

	"connectrpc.com/connect"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
	"github.com/jobplane/jobplane/sdk/wire/jobtrace"
)

// Slot offers. A slot allocated to a job is offered to the job's JobMaster,
// and freed if the JobMaster does not take it. Offers are per JobMaster,
// not per slot: the slots allocated while an offer to a JobMaster is on
// its way wait, and go together in the next one, so that a job given many
// slots here at once (one RequestSlots, or many RequestSlot calls in a
// burst) costs one OfferSlots, not one per slot. The offer registers the
// TaskExecutor with the JobMaster too (its address is in it), so that
// slots reach a JobMaster in one call, not two.

// jobMasterKey names a JobMaster that slots are offered and state changes
// reported to: the job's, under one token, at one address.
type jobMasterKey struct {
	jobID, address string
	token          election.Token
}

// offeredSlot is a slot waiting to be offered.
type offeredSlot struct {
	index        int
	allocationID string
}

// queueOfferLocked queues a slot for offering to a JobMaster, starting a
// sender for it unless one runs. Nothing is queued once Run is winding
// down. te.mu must be held.
func (te *TaskExecutor) queueOfferLocked(key jobMasterKey, index int, allocationID string) {
	if te.stopped {
		return
	}
	queued, sending := te.offers[key]
	te.offers[key] = append(queued, offeredSlot{index, allocationID})
	if !sending {
		ctx := te.ctx
		te.goRunLocked(func() { te.sendOffers(ctx, key) })
	}
}

// sendOffers offers what is queued for a JobMaster, one call at a time,
// until nothing is.
func (te *TaskExecutor) sendOffers(ctx context.Context, key jobMasterKey) {
	for {
		te.mu.Lock()
		slots := te.offers[key]
		if len(slots) == 0 {
			delete(te.offers, key)
			te.mu.Unlock()
			return
		}
		te.offers[key] = nil // still sending
		te.mu.Unlock()
		te.offer(ctx, key, slots)
	}
}

// offer offers newly allocated slots to the job's JobMaster and frees the
// ones it does not take.
func (te *TaskExecutor) offer(ctx context.Context, key jobMasterKey, slots []offeredSlot) {
	jm := te.jobMaster(key.address)
	offers := make([]*clusterv1.SlotOffer, len(slots))
	for i, s := range slots {
		offers[i] = &clusterv1.SlotOffer{AllocationId: s.allocationID, SlotIndex: int32(s.index)}
	}
	accepted := map[string]bool{}
	// The offer registers this TaskExecutor with the JobMaster as it
	// goes; a JobMaster that does not take a registration with an offer
	// (NOT_REGISTERED, or an answer without a heartbeat timeout) gets
	// RegisterTaskExecutor first.
	separate := jm.separate.Load()
	for attempt := 0; attempt < 20 && ctx.Err() == nil; attempt++ {
		sent := time.Now()
		te.offering(key, sent)
		var err error
		if separate {
			var reg *clusterv1.JobMasterServiceRegisterTaskExecutorResponse
			reg, err = jm.RegisterTaskExecutor(ctx, &clusterv1.JobMasterServiceRegisterTaskExecutorRequest{
				JobId: key.jobID, JobMasterToken: protoToken(key.token), TaskExecutorId: te.cfg.ID, Address: te.cfg.Address,
			})
			if err == nil {
				te.registered(key.jobID, key.token, sent, reg.GetHeartbeatInterval().AsDuration(), reg.GetHeartbeatTimeout().AsDuration(), reg.GetTaskLease().AsDuration())
			}
		}
		if err == nil {
			var resp *clusterv1.OfferSlotsResponse
			cctx, call := connect.NewClientContext(ctx)
			resp, err = jm.OfferSlots(cctx, &clusterv1.OfferSlotsRequest{
				JobId: key.jobID, JobMasterToken: protoToken(key.token), TaskExecutorId: te.cfg.ID, Offers: offers, Address: te.cfg.Address,
				DeploymentsInAnswer: true,
			})
			// A JobMaster that refuses the offer as from an unregistered
			// TaskExecutor, or takes it but names no timeout, did not
			// register this TaskExecutor as the offer asked: register and
			// offer again, so that the watchdog knows the timeout.
			if !separate && (err == nil && resp.GetHeartbeatTimeout().AsDuration() <= 0 || apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_NOT_REGISTERED)) {
				separate = true
				jm.separate.Store(true)
				continue
			}
			if err == nil {
				if !separate {
					te.registered(key.jobID, key.token, sent, resp.GetHeartbeatInterval().AsDuration(), resp.GetHeartbeatTimeout().AsDuration(), resp.GetTaskLease().AsDuration())
				}
				for _, a := range resp.GetAccepted() {
					accepted[a.GetAllocationId()] = true
				}
				te.deployAnswer(jobtrace.Deployment(context.Background(), call.ResponseHeader()), key, resp)
				break
			}
		}
		if apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_STALE_FENCING_TOKEN) || connect.CodeOf(err) == connect.CodeUnavailable && apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_NOT_LEADER) {
			break
		}
		te.log.Debug("offering slots failed; retrying", "job", key.jobID, "slots", len(slots), "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(te.cfg.RetryInterval):
		}
	}
	te.mu.Lock()
	defer te.mu.Unlock()
	j := te.jobs[key.jobID]
	for _, o := range slots {
		if accepted[o.allocationID] {
			continue
		}
		s := te.slots[o.index]
		// Free the slot unless it is in use: by an attempt of this
		// JobMaster, or for a newer JobMaster the job has since.
		idle := s.task == nil || s.task.token != key.token && isDone(s.task.done)
		if s.allocationID == o.allocationID && idle && j != nil && j.token == key.token {
			te.releaseLocked(s, "")
		}
	}
}

// offering records that an offer to the job's JobMaster of the key's
// token is being sent at sent (see job.offered); it takes te.mu.
func (te *TaskExecutor) offering(key jobMasterKey, sent time.Time) {
	te.mu.Lock()
	defer te.mu.Unlock()
	if j := te.jobs[key.jobID]; j != nil && j.token == key.token && j.offered.IsZero() {
		j.offered = sent
	}
}

// deployAnswer deploys the attempts that an offer's answer carries, as a
// SubmitTasks call of the job's JobMaster under the offer's token would.
// One that is refused here is not reported: the JobMaster, hearing no
// state of it, sends it again with SubmitTasks, whose answer says why.
//
// traced carries the deployments' trace, as the answer's headers gave it.
func (te *TaskExecutor) deployAnswer(traced context.Context, key jobMasterKey, resp *clusterv1.OfferSlotsResponse) {
	if len(resp.GetDeployments()) == 0 {
		return
	}
	token := protoToken(key.token)
	te.mu.Lock()
	defer te.mu.Unlock()
	if err := te.followDeploymentLocked(key.jobID, key.token, resp.GetHeartbeatTimeout().AsDuration(), resp.GetTaskLease().AsDuration()); err != nil {
		te.log.Debug("deployments in an offer's answer refused", "job", key.jobID, "err", err)
		return
	}
	for _, d := range resp.GetDeployments() {
		if fields := taskFields("", d.GetAllocationId(), d.GetAttempt(), d.GetInvokable()); len(fields) > 0 {
			te.log.Debug("a deployment in an offer's answer is incomplete", "job", key.jobID, "fields", fields)
			continue
		}
		if err := te.deployLocked(traced, submitTaskRequest(key.jobID, token, d), key.token); err != nil {
			te.log.Debug("a deployment in an offer's answer refused", "job", key.jobID, "attempt", d.GetAttempt(), "err", err)
		}
	}
}

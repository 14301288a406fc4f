package main

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"

	"connectrpc.com/connect"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	"github.com/jobplane/jobplane/gen/jobplane/cluster/v1/clusterv1connect"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
)

// breaks are the modes, each the promise it breaks. "" breaks nothing.
var breaks = map[string]string{
	"": "nothing: the reference TaskExecutor with the suite's invokables",
	// Registration and the ResourceManager.
	"no-rm-heartbeat":         "never sends ResourceManagerService.Heartbeat (fails it at once)",
	"ignore-rm-leader-change": "follows only the first leader of jobmanager it observes",
	"accept-stale-rm-token":   "takes RequestSlot under an older ResourceManager token as under the newest",
	"refuse-newer-rm-token":   "refuses RequestSlot under a ResourceManager token newer than the one it registered under",
	"stale-rm-until-called":   "takes RequestSlot under a ResourceManager token older than the grant it observed (and registered under) until a call under that grant came, as before contract 1.2",
	// The hole before contract 1.2.
	"trust-newer-resource-manager-token": "takes any ResourceManager token newer than the grant it registered under as the current one, granted or not: a forged epoch then locks the real ResourceManager out",
	"trust-newer-job-master-token":       "takes any JobMaster token newer than the job's current one on a JobMaster's own call (CancelTask, FreeSlot(s), Heartbeat, AdoptAttempts) as the job's current one, granted or not: a forged epoch then locks the job's real JobMaster out",
	// Running and reporting.
	"no-offer":         "answers its own OfferSlots (all accepted) without sending them",
	"never-finished":   "never reports FINISHED",
	"no-value":         "drops the value of a FINISHED report",
	"no-failure":       "drops the failure message of a FAILED report",
	"swallow-refusals": "answers OK where SubmitTask or RequestSlot would be refused FAILED_PRECONDITION",
	"repeat-refused":   "refuses a repeated SubmitTask of a deployed attempt SLOT_OCCUPIED",
	"no-reoffer":       "does not offer a job's allocations to a newer JobMaster of the job (answers such offers itself)",
	// Fencing, cancel and free.
	"accept-stale-jm-token": "takes SubmitTask and CancelTask under an older JobMaster token as under the job's newest",
	"ignore-cancel":         "answers CancelTask without canceling",
	"ignore-free-slot":      "answers FreeSlot and FreeSlots without freeing",
	// Liveness.
	"no-jm-heartbeat": "never sends HeartbeatFromTaskExecutor (fails it at once)",
	"no-watchdog":     "takes a failed heartbeat to a JobMaster for an answer, so it never stops a silent JobMaster's attempts",
	// Adoption.
	"no-task-lease":     "ignores task leases, so a newer JobMaster cancels the attempts",
	"cancel-on-refusal": "cancels an attempt whose state report was refused, even by a JobMaster that no longer has it (the bug of commit dda2c02)",
}

// breaker holds what the interceptors of a mode track.
type breaker struct {
	mode   string
	client connect.HTTPClient
	self   string // the TaskExecutor's own URL, for cancel-on-refusal

	mu sync.Mutex
	// rmNewest is the newest ResourceManager token in a call served;
	// rmRegistered the one of the last RegisterTaskExecutor taken;
	// rmTrusted the newest taken without a grant
	// (trust-newer-resource-manager-token).
	rmNewest, rmRegistered, rmTrusted *jobplanev1.FencingToken
	// jobs are the newest JobMaster epochs in calls served, and
	// jobTokens those tokens.
	jobs      map[string]uint64
	jobTokens sync.Map
	// jmTrusted are, by job, the newest JobMaster tokens that the
	// TaskExecutor refused as not the job's grant and the break took
	// (trust-newer-job-master-token).
	jmTrusted map[string]*jobplanev1.FencingToken
	// offered are the allocations offered, by job, for no-reoffer.
	offered sync.Map
	// deployed are the deployments served, for repeat-refused.
	deployed sync.Map
}

// observer returns the leader observer of the mode.
func (b *breaker) observer(o election.Observer) election.Observer {
	if b.mode == "ignore-rm-leader-change" {
		return firstLeader{o}
	}
	return o
}

// firstLeader passes on the first leader of jobmanager with an address,
// and no change after it.
type firstLeader struct{ election.Observer }

func (f firstLeader) ObserveLeader(ctx context.Context, name string, fn func(election.Leader) error) error {
	if name != election.JobManager {
		return f.Observer.ObserveLeader(ctx, name, fn)
	}
	seen := false
	return f.Observer.ObserveLeader(ctx, name, func(l election.Leader) error {
		if seen {
			return nil
		}
		seen = l.Address != "" && !l.Token.IsZero()
		return fn(l)
	})
}

func (b *breaker) handlerOptions() []connect.HandlerOption {
	return []connect.HandlerOption{connect.WithInterceptors(connect.UnaryInterceptorFunc(b.serve))}
}

func (b *breaker) clientOptions() []connect.ClientOption {
	return []connect.ClientOption{connect.WithInterceptors(connect.UnaryInterceptorFunc(b.send))}
}

// jobCall is a request of one job's JobMaster.
type jobCall interface {
	GetJobId() string
	GetJobMasterToken() *jobplanev1.FencingToken
}

// track records the newest JobMaster token of a job.
func (b *breaker) track(jobID string, t *jobplanev1.FencingToken) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if t.GetEpoch() > b.jobs[jobID] {
		b.jobs[jobID] = t.GetEpoch()
		b.jobTokens.Store(jobID, t)
	}
}

func (b *breaker) newestJob(jobID string) *jobplanev1.FencingToken {
	t, _ := b.jobTokens.Load(jobID)
	tk, _ := t.(*jobplanev1.FencingToken)
	return tk
}

// serve intercepts the calls the TaskExecutor serves.
func (b *breaker) serve(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		msg := req.Any()
		// Track first, then break: "the newest" includes this call.
		var rm *jobplanev1.FencingToken
		switch m := msg.(type) {
		case *clusterv1.RequestSlotRequest:
			rm = m.GetResourceManagerToken()
			b.track(m.GetJobId(), m.GetJobMasterToken())
		case *clusterv1.RequestSlotsRequest:
			rm = m.GetResourceManagerToken()
			for _, s := range m.GetSlots() {
				b.track(s.GetJobId(), s.GetJobMasterToken())
			}
		case *clusterv1.AdoptAttemptsRequest:
			for _, j := range m.GetJobs() {
				b.track(j.GetJobId(), j.GetJobMasterToken())
			}
		case jobCall:
			b.track(m.GetJobId(), m.GetJobMasterToken())
		}
		if rm != nil {
			b.mu.Lock()
			if rm.GetEpoch() > b.rmNewest.GetEpoch() {
				b.rmNewest = rm
			}
			newest, registered := b.rmNewest, b.rmRegistered
			b.mu.Unlock()
			switch b.mode {
			case "accept-stale-rm-token":
				setRMToken(msg, newest)
			case "refuse-newer-rm-token":
				if registered != nil && rm.GetEpoch() > registered.GetEpoch() {
					return nil, apierror.StaleToken(election.JobManager, registered.GetSessionId(), registered.GetEpoch())
				}
			case "stale-rm-until-called":
				// No call under a newer token came yet: send it on under
				// the grant, which the TaskExecutor takes, as one that
				// ignores the grant it observed would take the old token.
				if registered != nil && rm.GetEpoch() < registered.GetEpoch() && rm.GetEpoch() == newest.GetEpoch() {
					setRMToken(msg, registered)
				}
			case "trust-newer-resource-manager-token":
				if err := b.trust(msg, rm, registered); err != nil {
					return nil, err
				}
			}
		}
		switch m := msg.(type) {
		case *clusterv1.SubmitTaskRequest:
			switch b.mode {
			case "accept-stale-jm-token":
				m.JobMasterToken = b.newestJob(m.GetJobId())
			case "no-task-lease":
				m.TaskLease = nil
			}
		case *clusterv1.SubmitTasksRequest:
			switch b.mode {
			case "accept-stale-jm-token":
				m.JobMasterToken = b.newestJob(m.GetJobId())
			case "no-task-lease":
				m.TaskLease = nil
			}
		case *clusterv1.CancelTaskRequest:
			switch b.mode {
			case "accept-stale-jm-token":
				m.JobMasterToken = b.newestJob(m.GetJobId())
			case "ignore-cancel":
				return connect.NewResponse(&clusterv1.CancelTaskResponse{}), nil
			}
		case *clusterv1.FreeSlotRequest:
			if b.mode == "ignore-free-slot" {
				return connect.NewResponse(&clusterv1.FreeSlotResponse{}), nil
			}
		case *clusterv1.FreeSlotsRequest:
			if b.mode == "ignore-free-slot" {
				return connect.NewResponse(&clusterv1.FreeSlotsResponse{}), nil
			}
		}
		if b.mode == "repeat-refused" {
			if m, ok := msg.(*clusterv1.SubmitTaskRequest); ok {
				key := m.GetJobId() + "/" + m.GetAllocationId() + "/" + m.GetAttempt().String()
				if _, seen := b.deployed.LoadOrStore(key, true); seen {
					return nil, apierror.New(jobplanev1.ErrorReason_ERROR_REASON_SLOT_OCCUPIED, "brokente: a repeat", nil)
				}
			}
		}
		if b.mode == "trust-newer-job-master-token" {
			return b.trustJobMaster(ctx, next, req)
		}
		resp, err := next(ctx, req)
		if b.mode == "swallow-refusals" && connect.CodeOf(err) == connect.CodeFailedPrecondition {
			switch msg.(type) {
			case *clusterv1.SubmitTaskRequest:
				return connect.NewResponse(&clusterv1.SubmitTaskResponse{}), nil
			case *clusterv1.RequestSlotRequest:
				return connect.NewResponse(&clusterv1.RequestSlotResponse{}), nil
			}
		}
		return resp, err
	}
}

// trust makes the TaskExecutor take rm, if newer than the grant it
// registered under, as the current token (sending the call on under that
// grant, which it takes), and refuse every older token from then on, the
// real ResourceManager's too.
func (b *breaker) trust(msg any, rm, registered *jobplanev1.FencingToken) error {
	b.mu.Lock()
	if registered != nil && rm.GetEpoch() > registered.GetEpoch() && rm.GetEpoch() > b.rmTrusted.GetEpoch() {
		b.rmTrusted = rm
	}
	trusted := b.rmTrusted
	b.mu.Unlock()
	switch {
	case trusted == nil:
	case rm.GetEpoch() < trusted.GetEpoch():
		return apierror.StaleToken(election.JobManager, trusted.GetSessionId(), trusted.GetEpoch())
	case registered != nil && rm.GetEpoch() > registered.GetEpoch():
		setRMToken(msg, registered)
	}
	return nil
}

// jobMasterSender returns the job and token of a JobMaster's own call
// that trust-newer-job-master-token breaks, and the answer that takes it.
func jobMasterSender(msg any) (jobID string, t *jobplanev1.FencingToken, taken connect.AnyResponse) {
	switch m := msg.(type) {
	case *clusterv1.CancelTaskRequest:
		return m.GetJobId(), m.GetJobMasterToken(), connect.NewResponse(&clusterv1.CancelTaskResponse{})
	case *clusterv1.FreeSlotRequest:
		return m.GetJobId(), m.GetJobMasterToken(), connect.NewResponse(&clusterv1.FreeSlotResponse{})
	case *clusterv1.FreeSlotsRequest:
		return m.GetJobId(), m.GetJobMasterToken(), connect.NewResponse(&clusterv1.FreeSlotsResponse{})
	case *clusterv1.TaskExecutorServiceHeartbeatRequest:
		if jm := m.GetJobMaster(); jm != nil {
			return jm.GetJobId(), jm.GetToken(), connect.NewResponse(&clusterv1.TaskExecutorServiceHeartbeatResponse{})
		}
	}
	return "", nil, nil
}

// trustJobMaster serves a call as a TaskExecutor that takes any newer
// JobMaster token would: a JobMaster's own call that the TaskExecutor
// refuses STALE_FENCING_TOKEN under a token newer than the one the break
// took for the job is answered as taken (an AdoptAttempts entry so refused
// is dropped from the refusals), and from then on every call for the job
// under an older token, the real JobMaster's too, is refused naming it.
func (b *breaker) trustJobMaster(ctx context.Context, next connect.UnaryFunc, req connect.AnyRequest) (connect.AnyResponse, error) {
	msg := req.Any()
	trusted := func(jobID string) *jobplanev1.FencingToken {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.jmTrusted[jobID]
	}
	take := func(jobID string, t *jobplanev1.FencingToken) {
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.jmTrusted == nil {
			b.jmTrusted = make(map[string]*jobplanev1.FencingToken)
		}
		if t.GetEpoch() > b.jmTrusted[jobID].GetEpoch() {
			b.jmTrusted[jobID] = t
		}
	}
	stale := func(jobID string, t *jobplanev1.FencingToken) error {
		if tr := trusted(jobID); tr != nil && t.GetEpoch() < tr.GetEpoch() {
			return apierror.StaleToken(election.Job(jobID), tr.GetSessionId(), tr.GetEpoch())
		}
		return nil
	}
	if m, ok := msg.(*clusterv1.AdoptAttemptsRequest); ok {
		for _, j := range m.GetJobs() {
			if err := stale(j.GetJobId(), j.GetJobMasterToken()); err != nil {
				return nil, err
			}
		}
		resp, err := next(ctx, req)
		if err != nil {
			return resp, err
		}
		out, _ := resp.Any().(*clusterv1.AdoptAttemptsResponse)
		kept := out.GetRefused()[:0]
		for _, r := range out.GetRefused() {
			if r.GetReason() == jobplanev1.ErrorReason_ERROR_REASON_STALE_FENCING_TOKEN && int(r.GetIndex()) < len(m.GetJobs()) {
				if j := m.GetJobs()[r.GetIndex()]; newerThan(j.GetJobMasterToken(), r.GetMetadata()["current_epoch"]) {
					take(j.GetJobId(), j.GetJobMasterToken())
					continue
				}
			}
			kept = append(kept, r)
		}
		out.Refused = kept
		return resp, nil
	}
	jobID, t, taken := jobMasterSender(msg)
	if jobID == "" {
		if jc, ok := msg.(jobCall); ok {
			if err := stale(jc.GetJobId(), jc.GetJobMasterToken()); err != nil {
				return nil, err
			}
		}
		return next(ctx, req)
	}
	if err := stale(jobID, t); err != nil {
		return nil, err
	}
	resp, err := next(ctx, req)
	if reason, md, _ := apierror.Info(err); reason == jobplanev1.ErrorReason_ERROR_REASON_STALE_FENCING_TOKEN && newerThan(t, md["current_epoch"]) {
		take(jobID, t)
		return taken, nil
	}
	return resp, err
}

// newerThan reports whether t's epoch is past the decimal epoch.
func newerThan(t *jobplanev1.FencingToken, epoch string) bool {
	e, _ := strconv.ParseUint(epoch, 10, 64)
	return t.GetEpoch() > e
}

func setRMToken(msg any, t *jobplanev1.FencingToken) {
	switch m := msg.(type) {
	case *clusterv1.RequestSlotRequest:
		m.ResourceManagerToken = t
	case *clusterv1.RequestSlotsRequest:
		m.ResourceManagerToken = t
	}
}

// send intercepts the calls the TaskExecutor makes.
func (b *breaker) send(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		switch m := req.Any().(type) {
		case *clusterv1.ResourceManagerServiceHeartbeatRequest:
			if b.mode == "no-rm-heartbeat" {
				return nil, connect.NewError(connect.CodeUnavailable, errors.New("brokente: no heartbeat"))
			}
		case *clusterv1.OfferSlotsRequest:
			switch b.mode {
			case "no-offer":
				return connect.NewResponse(&clusterv1.OfferSlotsResponse{Accepted: m.GetOffers()}), nil
			case "no-reoffer":
				var fresh []*clusterv1.SlotOffer
				for _, o := range m.GetOffers() {
					if _, again := b.offered.LoadOrStore(m.GetJobId()+"/"+o.GetAllocationId(), true); !again {
						fresh = append(fresh, o)
					}
				}
				m.Offers = fresh
			}
		case *clusterv1.UpdateTaskExecutionStateRequest:
			if st := b.report([]*jobplanev1.TaskExecutionStatus{m.GetStatus()}); len(st) == 0 {
				return connect.NewResponse(&clusterv1.UpdateTaskExecutionStateResponse{}), nil
			}
		case *clusterv1.UpdateTaskExecutionStatesRequest:
			m.Statuses = b.report(m.GetStatuses())
		case *clusterv1.UpdateTaskExecutionStatesOfJobsRequest:
			for _, e := range m.GetJobs() {
				e.Statuses = b.report(e.GetStatuses())
			}
		case *clusterv1.HeartbeatFromTaskExecutorRequest:
			if b.mode == "no-jm-heartbeat" {
				return nil, connect.NewError(connect.CodeUnavailable, errors.New("brokente: no heartbeat"))
			}
			for _, j := range m.GetJobs() {
				j.Attempts = b.report(j.GetAttempts())
			}
		}
		resp, err := next(ctx, req)
		if m, ok := req.Any().(*clusterv1.ResourceManagerServiceRegisterTaskExecutorRequest); ok && err == nil {
			// Registered only once the ResourceManager took it: a
			// TaskExecutor may observe a grant it cannot register under
			// yet.
			b.mu.Lock()
			b.rmRegistered = m.GetResourceManagerToken()
			b.mu.Unlock()
		}
		if _, hb := req.Any().(*clusterv1.HeartbeatFromTaskExecutorRequest); hb && err != nil && b.mode == "no-watchdog" {
			return connect.NewResponse(&clusterv1.HeartbeatFromTaskExecutorResponse{}), nil
		}
		if b.mode == "no-task-lease" && err == nil {
			switch r := resp.Any().(type) {
			case *clusterv1.OfferSlotsResponse:
				r.TaskLease = nil
			case *clusterv1.JobMasterServiceRegisterTaskExecutorResponse:
				r.TaskLease = nil
			case *clusterv1.HeartbeatFromTaskExecutorResponse:
				r.TaskLease = nil
			}
		}
		if b.mode == "cancel-on-refusal" {
			b.cancelRefused(req.Any(), resp, err)
		}
		return resp, err
	}
}

// report applies the mode to the state changes of a report, and returns
// those to send.
func (b *breaker) report(sts []*jobplanev1.TaskExecutionStatus) []*jobplanev1.TaskExecutionStatus {
	var out []*jobplanev1.TaskExecutionStatus
	for _, st := range sts {
		switch b.mode {
		case "never-finished":
			if st.GetState() == jobplanev1.ExecutionState_EXECUTION_STATE_FINISHED {
				continue
			}
		case "no-value":
			st.Value = nil
		case "no-failure":
			st.FailureMessage = ""
		}
		out = append(out, st)
	}
	return out
}

// cancelRefused cancels, under the job's newest JobMaster token, every
// attempt of a state report that was refused.
func (b *breaker) cancelRefused(msg any, resp connect.AnyResponse, err error) {
	var refused []jobCall
	var attempts [][]*jobplanev1.TaskExecutionStatus
	switch m := msg.(type) {
	case *clusterv1.UpdateTaskExecutionStateRequest:
		if err != nil {
			refused, attempts = append(refused, m), append(attempts, []*jobplanev1.TaskExecutionStatus{m.GetStatus()})
		}
	case *clusterv1.UpdateTaskExecutionStatesRequest:
		if err != nil {
			refused, attempts = append(refused, m), append(attempts, m.GetStatuses())
		}
	case *clusterv1.UpdateTaskExecutionStatesOfJobsRequest:
		var idx []int32
		if err == nil {
			for _, r := range resp.Any().(*clusterv1.UpdateTaskExecutionStatesOfJobsResponse).GetRefused() {
				idx = append(idx, r.GetIndex())
			}
		}
		for i, e := range m.GetJobs() {
			if err != nil || slices.Contains(idx, int32(i)) {
				refused, attempts = append(refused, e), append(attempts, e.GetStatuses())
			}
		}
	}
	te := clusterv1connect.NewTaskExecutorServiceClient(b.client, b.self)
	for i, r := range refused {
		for _, st := range attempts[i] {
			_, _ = te.CancelTask(context.Background(), &clusterv1.CancelTaskRequest{JobId: r.GetJobId(), JobMasterToken: b.newestJob(r.GetJobId()), Attempt: st.GetAttempt()})
		}
	}
}

package runner

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	"github.com/jobplane/jobplane/gen/jobplane/cluster/v1/clusterv1connect"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
)

// The timings the runner's JobManager side gives a TaskExecutor under
// test: heartbeats often, so that cases are short, and timeouts long, so
// that a slow machine does not fail them.
const (
	teHeartbeatInterval = 100 * time.Millisecond
	teHeartbeatTimeout  = 10 * time.Second
	// teActs is how long a case waits for the TaskExecutor to do what it
	// does on its own once told (heartbeat, offer, report, cancel a task,
	// free a slot): far above what it takes, so that a loaded machine does
	// not fail a case; a promise with a bound of its own is checked at
	// that bound.
	teActs = 15 * time.Second
)

// teCluster is the JobManager side the runner plays in the TaskExecutor
// mode: a ResourceManager and the JobMasters of the cases' jobs, served
// on one loopback address, implemented from the contract just enough to
// drive a TaskExecutor and record what it does. Every call it gets is an
// event of the case's log (Source "taskexecutor"): "rm-register",
// "rm-heartbeat", "jm-register", "offer", "state" (one per state change,
// however it came), "jm-heartbeat", "jm-heartbeat-plain", "disconnect".
type teCluster struct {
	clusterv1connect.UnimplementedResourceManagerServiceHandler
	log *Log

	mu sync.Mutex
	// rmToken is the current ResourceManager leadership's token.
	rmToken election.Token
	// regs are the TaskExecutors' registrations, by id.
	regs map[string]*teRegistration
	// jobs are the JobMasters' current tokens, by job id.
	jobs map[string]election.Token
	// taskLease, if positive, is granted with every registration, offer
	// and heartbeat answer.
	taskLease time.Duration
	// timeout is the JobMasters' heartbeat timeout (default
	// teHeartbeatTimeout).
	timeout time.Duration
	// silent: the JobMasters answer nothing (every call to them fails
	// UNAVAILABLE, as if their process were cut off).
	silent bool
	// slowRunning delays taking a report of RUNNING this long, as a busy
	// JobMaster would: a TaskExecutor that sends its next report before
	// the answer has it taken first.
	slowRunning time.Duration
	// hold, if set, holds every state report under holdToken until it is
	// closed, and then refuses it NOT_LEADER.
	hold      chan struct{}
	holdToken election.Token
	// noRegistrations: RegisterTaskExecutor answers UNAVAILABLE, as a
	// ResourceManager that is not ready yet would.
	noRegistrations bool
}

// teRegistration is a TaskExecutor's registration with the runner's
// ResourceManager.
type teRegistration struct {
	id, address, registrationID string
	token                       election.Token
	invokables                  []string
	slots                       []*clusterv1.SlotStatus
}

func newTECluster(log *Log) *teCluster {
	return &teCluster{log: log, regs: map[string]*teRegistration{}, jobs: map[string]election.Token{}}
}

// setResourceManager makes t the ResourceManager's token.
func (c *teCluster) setResourceManager(t election.Token) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rmToken = t
}

// setJobMaster makes t the token of the job's JobMaster.
func (c *teCluster) setJobMaster(jobID string, t election.Token) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.jobs[jobID] = t
}

// holdRegistrations makes RegisterTaskExecutor answer UNAVAILABLE (on),
// or take registrations again (off).
func (c *teCluster) holdRegistrations(on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.noRegistrations = on
}

// registration returns the TaskExecutor's latest registration, if any.
func (c *teCluster) registration() *teRegistration {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.regs {
		return r
	}
	return nil
}

// checkRM checks a call's ResourceManager token against the current one.
func (c *teCluster) checkRM(t *jobplanev1.FencingToken) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch got := token(t); {
	case got.IsZero():
		return apierror.BadRequest(apierror.Field{Path: "resource_manager_token", Description: "required"})
	case got.Epoch > c.rmToken.Epoch:
		return apierror.NotLeader(election.JobManager, "")
	case got != c.rmToken:
		return apierror.StaleToken(election.JobManager, c.rmToken.SessionID, c.rmToken.Epoch)
	}
	return nil
}

// checkJM checks a call's JobMaster token against the job's current one.
func (c *teCluster) checkJM(jobID string, t *jobplanev1.FencingToken) error {
	if err := c.unanswered(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	cur, ok := c.jobs[jobID]
	switch got := token(t); {
	case !ok || got.Epoch > cur.Epoch:
		return apierror.NotLeader(election.Job(jobID), "")
	case got != cur:
		return apierror.StaleToken(election.Job(jobID), cur.SessionID, cur.Epoch)
	}
	return nil
}

// hbTimeout is the JobMasters' heartbeat timeout.
func (c *teCluster) hbTimeout() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.timeout > 0 {
		return c.timeout
	}
	return teHeartbeatTimeout
}

// silence makes the JobMasters answer nothing from now on.
func (c *teCluster) silence() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.silent = true
}

// unanswered is the error of every call to a silent JobMaster, nil while
// the JobMasters answer.
func (c *teCluster) unanswered() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.silent {
		return connect.NewError(connect.CodeUnavailable, errors.New("the runner's JobMasters are silent"))
	}
	return nil
}

func (c *teCluster) lease() *durationpb.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.taskLease <= 0 {
		return nil
	}
	return durationpb.New(c.taskLease)
}

func (c *teCluster) RegisterTaskExecutor(_ context.Context, m *clusterv1.ResourceManagerServiceRegisterTaskExecutorRequest) (*clusterv1.ResourceManagerServiceRegisterTaskExecutorResponse, error) {
	err := c.checkRM(m.GetResourceManagerToken())
	c.mu.Lock()
	if err == nil && c.noRegistrations {
		err = connect.NewError(connect.CodeUnavailable, errors.New("the runner's ResourceManager takes no registrations for now"))
	}
	c.mu.Unlock()
	ev := Event{Source: "taskexecutor", Op: "rm-register", Key: m.GetTaskExecutorId(), Token: token(m.GetResourceManagerToken()), Err: err,
		Detail: fmt.Sprintf("address=%s slots=%d invokables=%s", m.GetAddress(), len(m.GetSlotReport().GetSlots()), strings.Join(m.GetInvokables(), ","))}
	if err != nil {
		c.log.Add(ev)
		return nil, err
	}
	c.mu.Lock()
	r := &teRegistration{
		id: m.GetTaskExecutorId(), address: m.GetAddress(), registrationID: fmt.Sprintf("reg-%d", c.log.Len()),
		token: token(m.GetResourceManagerToken()), invokables: m.GetInvokables(), slots: m.GetSlotReport().GetSlots(),
	}
	c.regs[r.id] = r
	c.mu.Unlock()
	ev.Detail += " registration=" + r.registrationID
	c.log.Add(ev)
	return &clusterv1.ResourceManagerServiceRegisterTaskExecutorResponse{
		RegistrationId: r.registrationID, HeartbeatInterval: durationpb.New(teHeartbeatInterval), HeartbeatTimeout: durationpb.New(teHeartbeatTimeout),
	}, nil
}

func (c *teCluster) Heartbeat(_ context.Context, m *clusterv1.ResourceManagerServiceHeartbeatRequest) (*clusterv1.ResourceManagerServiceHeartbeatResponse, error) {
	err := c.checkRM(m.GetResourceManagerToken())
	if err == nil {
		c.mu.Lock()
		r := c.regs[m.GetTaskExecutorId()]
		if r == nil || r.registrationID != m.GetRegistrationId() {
			err = apierror.New(jobplanev1.ErrorReason_ERROR_REASON_NOT_REGISTERED, "unknown registration", nil)
		} else if m.GetSlotReport() != nil {
			r.slots = m.GetSlotReport().GetSlots()
		}
		c.mu.Unlock()
	}
	c.log.Add(Event{Source: "taskexecutor", Op: "rm-heartbeat", Key: m.GetTaskExecutorId(), Token: token(m.GetResourceManagerToken()), Err: err, Detail: "registration=" + m.GetRegistrationId()})
	if err != nil {
		return nil, err
	}
	return &clusterv1.ResourceManagerServiceHeartbeatResponse{SlotReportVersion: m.GetSlotReportVersion()}, nil
}

// teJobMaster serves JobMasterService for the runner's JobMasters.
type teJobMaster struct {
	clusterv1connect.UnimplementedJobMasterServiceHandler
	c *teCluster
}

func (j teJobMaster) RegisterTaskExecutor(_ context.Context, m *clusterv1.JobMasterServiceRegisterTaskExecutorRequest) (*clusterv1.JobMasterServiceRegisterTaskExecutorResponse, error) {
	err := j.c.checkJM(m.GetJobId(), m.GetJobMasterToken())
	j.c.log.Add(Event{Source: "taskexecutor", Op: "jm-register", Key: m.GetJobId(), Token: token(m.GetJobMasterToken()), Err: err})
	if err != nil {
		return nil, err
	}
	return &clusterv1.JobMasterServiceRegisterTaskExecutorResponse{
		HeartbeatInterval: durationpb.New(teHeartbeatInterval), HeartbeatTimeout: durationpb.New(j.c.hbTimeout()), TaskLease: j.c.lease(),
	}, nil
}

func (j teJobMaster) OfferSlots(_ context.Context, m *clusterv1.OfferSlotsRequest) (*clusterv1.OfferSlotsResponse, error) {
	err := j.c.checkJM(m.GetJobId(), m.GetJobMasterToken())
	var ids []string
	for _, o := range m.GetOffers() {
		ids = append(ids, o.GetAllocationId())
	}
	j.c.log.Add(Event{Source: "taskexecutor", Op: "offer", Key: m.GetJobId(), Token: token(m.GetJobMasterToken()), Err: err, Detail: strings.Join(ids, ",")})
	if err != nil {
		return nil, err
	}
	return &clusterv1.OfferSlotsResponse{
		Accepted: m.GetOffers(), HeartbeatInterval: durationpb.New(teHeartbeatInterval), HeartbeatTimeout: durationpb.New(j.c.hbTimeout()), TaskLease: j.c.lease(),
	}, nil
}

// report takes one job's state changes as UpdateTaskExecutionStates
// does, recording each.
func (j teJobMaster) report(ctx context.Context, jobID string, t *jobplanev1.FencingToken, statuses []*jobplanev1.TaskExecutionStatus, via string) error {
	j.c.mu.Lock()
	hold, held := j.c.hold, j.c.hold != nil && token(t) == j.c.holdToken
	j.c.mu.Unlock()
	if held {
		j.c.log.Add(Event{Source: "taskexecutor", Op: "report-held", Key: jobID, Token: token(t)})
		select {
		case <-hold:
		case <-ctx.Done():
			return ctx.Err()
		}
		err := apierror.NotLeader(election.Job(jobID), "")
		j.c.log.Add(Event{Source: "taskexecutor", Op: "report-refused", Key: jobID, Token: token(t), Err: err})
		return err
	}
	j.c.mu.Lock()
	slow := j.c.slowRunning
	j.c.mu.Unlock()
	if slow > 0 && slices.ContainsFunc(statuses, func(st *jobplanev1.TaskExecutionStatus) bool {
		return st.GetState() == jobplanev1.ExecutionState_EXECUTION_STATE_RUNNING
	}) {
		timer := time.NewTimer(slow)
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	err := j.c.checkJM(jobID, t)
	for _, st := range statuses {
		detail := via
		if st.GetState() == jobplanev1.ExecutionState_EXECUTION_STATE_FINISHED {
			detail += fmt.Sprintf(" value=%q", st.GetValue())
		}
		if st.GetFailureMessage() != "" {
			detail += fmt.Sprintf(" failure=%q", st.GetFailureMessage())
		}
		j.c.log.Add(Event{Source: "taskexecutor", Op: "state", Key: jobID, Token: token(t), Attempt: attemptKey(st.GetAttempt()), State: st.GetState(), Err: err, Detail: strings.TrimSpace(detail)})
	}
	return err
}

func (j teJobMaster) UpdateTaskExecutionState(ctx context.Context, m *clusterv1.UpdateTaskExecutionStateRequest) (*clusterv1.UpdateTaskExecutionStateResponse, error) {
	if err := j.report(ctx, m.GetJobId(), m.GetJobMasterToken(), []*jobplanev1.TaskExecutionStatus{m.GetStatus()}, ""); err != nil {
		return nil, err
	}
	return &clusterv1.UpdateTaskExecutionStateResponse{}, nil
}

func (j teJobMaster) UpdateTaskExecutionStates(ctx context.Context, m *clusterv1.UpdateTaskExecutionStatesRequest) (*clusterv1.UpdateTaskExecutionStatesResponse, error) {
	if err := j.report(ctx, m.GetJobId(), m.GetJobMasterToken(), m.GetStatuses(), ""); err != nil {
		return nil, err
	}
	return &clusterv1.UpdateTaskExecutionStatesResponse{}, nil
}

func (j teJobMaster) UpdateTaskExecutionStatesOfJobs(ctx context.Context, m *clusterv1.UpdateTaskExecutionStatesOfJobsRequest) (*clusterv1.UpdateTaskExecutionStatesOfJobsResponse, error) {
	resp := &clusterv1.UpdateTaskExecutionStatesOfJobsResponse{}
	for i, e := range m.GetJobs() {
		if err := j.report(ctx, e.GetJobId(), e.GetJobMasterToken(), e.GetStatuses(), ""); err != nil {
			resp.Refused = append(resp.Refused, apierror.Item(i, err))
		}
		resp.Results = append(resp.Results, &clusterv1.UpdateTaskExecutionStatesResponse{})
	}
	return resp, nil
}

func (j teJobMaster) HeartbeatFromTaskExecutor(ctx context.Context, m *clusterv1.HeartbeatFromTaskExecutorRequest) (*clusterv1.HeartbeatFromTaskExecutorResponse, error) {
	if err := j.c.unanswered(); err != nil {
		j.c.log.Add(Event{Source: "taskexecutor", Op: "jm-heartbeat", Key: m.GetTaskExecutorId(), Err: err})
		return nil, err
	}
	var jobs []string
	for _, r := range m.GetJobs() {
		jobs = append(jobs, fmt.Sprintf("%s@%d", r.GetJobId(), r.GetJobMasterToken().GetEpoch()))
		// A complete report restates what was reported; only an
		// incomplete one carries changes whose own report failed.
		if !r.GetComplete() && len(r.GetAttempts()) > 0 {
			_ = j.report(ctx, r.GetJobId(), r.GetJobMasterToken(), r.GetAttempts(), "via=heartbeat")
		}
	}
	j.c.log.Add(Event{Source: "taskexecutor", Op: "jm-heartbeat", Key: m.GetTaskExecutorId(), Detail: "jobs=" + strings.Join(jobs, ",")})
	return &clusterv1.HeartbeatFromTaskExecutorResponse{TaskLease: j.c.lease()}, nil
}

func (j teJobMaster) Heartbeat(_ context.Context, m *clusterv1.JobMasterServiceHeartbeatRequest) (*clusterv1.JobMasterServiceHeartbeatResponse, error) {
	err := j.c.checkJM(m.GetJobId(), m.GetJobMasterToken())
	j.c.log.Add(Event{Source: "taskexecutor", Op: "jm-heartbeat-plain", Key: m.GetJobId(), Token: token(m.GetJobMasterToken()), Err: err})
	if err != nil {
		return nil, err
	}
	return &clusterv1.JobMasterServiceHeartbeatResponse{}, nil
}

func (j teJobMaster) DisconnectTaskExecutor(_ context.Context, m *clusterv1.DisconnectTaskExecutorRequest) (*clusterv1.DisconnectTaskExecutorResponse, error) {
	j.c.log.Add(Event{Source: "taskexecutor", Op: "disconnect", Key: m.GetJobId(), Token: token(m.GetJobMasterToken())})
	return &clusterv1.DisconnectTaskExecutorResponse{}, nil
}

// states returns the state changes reported for the job's attempt,
// taken (not refused), in the order they came.
func (c *teCluster) states(jobID, attempt string) []Event {
	return ok(c.log.Events(func(e Event) bool { return e.Op == "state" && e.Key == jobID && e.Attempt == attempt }))
}

// hasState reports whether one of evs is st.
func hasState(evs []Event, st jobplanev1.ExecutionState) bool {
	return slices.ContainsFunc(evs, func(e Event) bool { return e.State == st })
}

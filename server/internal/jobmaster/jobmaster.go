package jobmaster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/internal/apierror"
	"github.com/jobplane/jobplane/server/internal/jobstatus"
)

// Config configures a JobMaster.
type Config struct {
	// JobID is the job's id. Required.
	JobID string
	// Graph is the job's execution plan, overrides applied. Required.
	Graph *jobplanev1.JobGraph
	// Token is the JobMaster's fencing token: its grant in "job/<id>".
	// Required.
	Token hastore.Token
	// Address is the base URL at which this process serves
	// JobMasterService. Required.
	Address string
	// ResourceManager is a client of the ResourceManager. Required.
	ResourceManager jobplanev1connect.ResourceManagerServiceClient
	// HTTPClient carries calls to TaskExecutors. Required.
	HTTPClient connect.HTTPClient
	// SubmitTime is when the job was accepted.
	SubmitTime time.Time
	// HeartbeatInterval is how often the JobMaster probes its
	// TaskExecutors. Default: 1s.
	HeartbeatInterval time.Duration
	// HeartbeatTimeout is how long a TaskExecutor may leave the probes
	// unanswered before its attempts count as lost. Default: 10s.
	HeartbeatTimeout time.Duration
	// OnStatus, if set, is called from the JobMaster's goroutine with the
	// job's summary after every status change; it must not block.
	OnStatus func(*jobplanev1.JobSummary)
	// Logger receives the JobMaster's logs. Default: slog.Default().
	Logger *slog.Logger
}

// Result is how a JobMaster ended.
type Result struct {
	// Status is FINISHED, FAILED or CANCELED, or SUSPENDED when the
	// JobMaster stopped without a result (its leadership ended).
	Status jobplanev1.JobStatus
	// Failure is the root cause of a FAILED job.
	Failure *jobplanev1.FailureInfo
	// Restarts counts the restarts under this JobMaster.
	Restarts int
}

// JobMaster runs one job under one fencing token. Create it with New, Run
// it, and route its job's JobMasterService calls to Handle.
type JobMaster struct {
	cfg    Config
	log    *slog.Logger
	events chan func()
	done   chan struct{}

	// Owned by Run's goroutine.
	status     jobplanev1.JobStatus
	statusTime time.Time
	failure    *jobplanev1.FailureInfo
	restart    restartPolicy
	vertices   []*vertex
	slots      map[string]*slotRef // by allocation id
	executors  map[string]*executorRef
	endStatus  jobplanev1.JobStatus // the status to reach once every attempt is terminal
	restartAt  *time.Timer
	declaring  bool // a declaration to the ResourceManager is in flight
	declared   int  // the slots last declared
	// rpcCtx bounds the JobMaster's own calls; it ends when Run stops, and
	// rpcs tracks those calls so none outlives Run.
	rpcCtx context.Context
	rpcs   sync.WaitGroup
}

type vertex struct {
	v        *jobplanev1.JobVertex
	subtasks []*subtask
}

type subtask struct {
	index    int
	attempt  int
	state    jobplanev1.ExecutionState
	slot     *slotRef
	failure  *jobplanev1.FailureInfo
	cancelOn bool      // cancel once its deployment returns
	since    time.Time // when the JobMaster last learnt the attempt's state
}

type slotRef struct {
	allocationID string
	executor     string
	index        int
	task         *subtask
}

type executorRef struct {
	id, address string
	client      jobplanev1connect.TaskExecutorServiceClient
	lastSeen    time.Time // the last answered heartbeat (or registration)
	probing     bool      // a heartbeat is in flight
}

// New returns a JobMaster for cfg; nothing runs until Run.
func New(cfg Config) (*JobMaster, error) {
	switch {
	case cfg.JobID == "" || cfg.Graph == nil || cfg.Token.IsZero() || cfg.Address == "":
		return nil, errors.New("jobmaster: job id, graph, token and address are required")
	case cfg.ResourceManager == nil || cfg.HTTPClient == nil:
		return nil, errors.New("jobmaster: ResourceManager and HTTP clients are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = time.Second
	}
	if cfg.HeartbeatTimeout <= 0 {
		cfg.HeartbeatTimeout = 10 * time.Second
	}
	jm := &JobMaster{
		cfg:       cfg,
		log:       cfg.Logger.With("job", cfg.JobID, "token", cfg.Token),
		events:    make(chan func(), 64),
		done:      make(chan struct{}),
		status:    jobplanev1.JobStatus_JOB_STATUS_CREATED,
		restart:   restartPolicy{strategy: cfg.Graph.GetConfig().GetRestartStrategy()},
		slots:     make(map[string]*slotRef),
		executors: make(map[string]*executorRef),
	}
	jm.statusTime = time.Now()
	for _, v := range cfg.Graph.GetVertices() {
		vx := &vertex{v: v}
		for i := range int(v.GetParallelism()) {
			vx.subtasks = append(vx.subtasks, &subtask{index: i, state: jobstatus.ExecCreated})
		}
		jm.vertices = append(jm.vertices, vx)
	}
	return jm, nil
}

// Token returns the JobMaster's fencing token.
func (jm *JobMaster) Token() hastore.Token { return jm.cfg.Token }

// do runs f on the JobMaster's goroutine and waits for it; it fails with
// NOT_LEADER once the JobMaster has stopped.
func (jm *JobMaster) do(ctx context.Context, f func()) error {
	ran := make(chan struct{})
	select {
	case jm.events <- func() { f(); close(ran) }:
	case <-jm.done:
		return apierror.NotLeader(hastore.JobElection(jm.cfg.JobID), "")
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-ran:
		return nil
	case <-jm.done:
		return apierror.NotLeader(hastore.JobElection(jm.cfg.JobID), "")
	case <-ctx.Done():
		return ctx.Err()
	}
}

// post queues f for the JobMaster's goroutine without waiting; it is
// dropped once the JobMaster has stopped.
func (jm *JobMaster) post(f func()) {
	var stopping <-chan struct{}
	if jm.rpcCtx != nil {
		stopping = jm.rpcCtx.Done()
	}
	select {
	case jm.events <- f:
	case <-jm.done:
	case <-stopping:
	}
}

// Cancel asks the job to cancel; it returns the status right after.
func (jm *JobMaster) Cancel(ctx context.Context) (jobplanev1.JobStatus, error) {
	var st jobplanev1.JobStatus
	err := jm.do(ctx, func() {
		jm.cancelJob()
		st = jm.status
	})
	return st, err
}

// Details returns the job's details as the JobMaster sees them.
func (jm *JobMaster) Details(ctx context.Context, full bool) (*jobplanev1.JobDetails, error) {
	var d *jobplanev1.JobDetails
	err := jm.do(ctx, func() { d = jm.detailsLocked(full) })
	return d, err
}

// Run runs the job until it is globally terminal, returning its result, or
// until ctx ends (the leadership is lost), returning SUSPENDED after
// canceling its attempts and freeing its slots.
func (jm *JobMaster) Run(ctx context.Context) Result {
	defer close(jm.done)
	rpcCtx, stopRPCs := context.WithCancel(ctx)
	jm.rpcCtx = rpcCtx
	// Calls still in flight when Run stops are cut off and waited for, so
	// that no late declaration or deployment acts for this JobMaster.
	defer jm.rpcs.Wait()
	defer stopRPCs()
	jm.setStatus(jobstatus.Running)
	jm.declare(ctx, true)
	// The ResourceManager may change leaders or lose a declaration:
	// declare again now and then while running.
	redeclare := time.NewTicker(time.Second)
	defer redeclare.Stop()
	// TaskExecutors are probed for the job's attempts: a lost report is
	// recovered from the answer, and a TaskExecutor that stops answering is
	// lost with its attempts.
	probe := time.NewTicker(jm.cfg.HeartbeatInterval)
	defer probe.Stop()
	for {
		if jobstatus.IsGloballyTerminal(jm.status) {
			stopRPCs()
			jm.rpcs.Wait()
			jm.release(context.WithoutCancel(ctx))
			return Result{Status: jm.status, Failure: jm.failure, Restarts: jm.restart.used}
		}
		select {
		case <-ctx.Done():
			stopRPCs()
			jm.rpcs.Wait()
			jm.suspend()
			return Result{Status: jobstatus.Suspended, Restarts: jm.restart.used}
		case f := <-jm.events:
			if ctx.Err() != nil {
				continue // the leadership ended: act no more
			}
			f()
			jm.declare(ctx, false)
		case <-redeclare.C:
			jm.declare(ctx, true)
		case <-probe.C:
			jm.probeExecutors()
		}
	}
}

// declare tells the ResourceManager how many slots the job needs, when
// that changed or force is set, one declaration at a time.
func (jm *JobMaster) declare(ctx context.Context, force bool) {
	needed := jm.neededLocked()
	if jm.declaring || !force && needed == jm.declared {
		return
	}
	jm.declaring = true
	invokables := jm.invokables()
	jm.goRPC(func(ctx context.Context) {
		err := jm.connectResourceManager(ctx, needed, invokables)
		if err != nil && ctx.Err() == nil {
			jm.log.Debug("declaring to the ResourceManager failed; will retry", "err", err)
		}
		jm.post(func() {
			jm.declaring = false
			if err == nil {
				jm.declared = needed
			}
		})
	})
}

// goRPC runs a call on its own goroutine under the JobMaster's RPC
// context, which Run cuts off and waits for when it stops.
func (jm *JobMaster) goRPC(f func(ctx context.Context)) {
	jm.rpcs.Add(1)
	go func() {
		defer jm.rpcs.Done()
		f(jm.rpcCtx)
	}()
}

// needed is the number of slots the job needs now: one per subtask that
// is not finished (a slot runs one attempt at a time).
func (jm *JobMaster) neededLocked() int {
	if jm.status != jobstatus.Running {
		return 0
	}
	n := 0
	for _, v := range jm.vertices {
		for _, st := range v.subtasks {
			if st.state != jobstatus.ExecFinished {
				n++
			}
		}
	}
	return n
}

func (jm *JobMaster) invokables() []string {
	seen := map[string]bool{}
	var out []string
	for _, v := range jm.vertices {
		if name := v.v.GetInvokable(); !seen[name] {
			seen[name] = true
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// connectResourceManager registers the JobMaster and declares its needs.
func (jm *JobMaster) connectResourceManager(ctx context.Context, needed int, invokables []string) error {
	token := protoToken(jm.cfg.Token)
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := jm.cfg.ResourceManager.RegisterJobMaster(rctx, &jobplanev1.RegisterJobMasterRequest{
		JobId: jm.cfg.JobID, JobMasterAddress: jm.cfg.Address, JobMasterToken: token,
	}); err != nil {
		return err
	}
	_, err := jm.cfg.ResourceManager.DeclareResourceRequirements(rctx, &jobplanev1.DeclareResourceRequirementsRequest{
		JobId: jm.cfg.JobID, JobMasterToken: token,
		Requirements: []*jobplanev1.ResourceRequirement{{Slots: int32(needed), Invokables: invokables}},
	})
	return err
}

func (jm *JobMaster) setStatus(to jobplanev1.JobStatus) {
	next, err := jobstatus.Move(jm.status, to)
	if err != nil {
		jm.log.Error("refusing an illegal status change", "err", err)
		return
	}
	jm.log.Info("job status", "from", jm.status, "to", next)
	jm.status, jm.statusTime = next, time.Now()
	if jm.cfg.OnStatus != nil {
		jm.cfg.OnStatus(jm.summaryLocked())
	}
}

// deploy assigns free slots to subtasks waiting for one and submits them.
func (jm *JobMaster) deploy() {
	if jm.status != jobstatus.Running {
		return
	}
	var free []*slotRef
	for _, s := range jm.slots {
		if s.task == nil {
			free = append(free, s)
		}
	}
	sort.Slice(free, func(i, j int) bool { return free[i].allocationID < free[j].allocationID })
	for _, v := range jm.vertices {
		for _, st := range v.subtasks {
			if len(free) == 0 {
				return
			}
			if st.state != jobstatus.ExecCreated && st.state != jobstatus.ExecScheduled {
				continue
			}
			s := free[0]
			free = free[1:]
			s.task, st.slot = st, s
			st.state, st.since = jobstatus.ExecDeploying, time.Now()
			jm.submit(v, st)
		}
	}
}

func (jm *JobMaster) attemptID(v *vertex, st *subtask) *jobplanev1.ExecutionAttemptId {
	return &jobplanev1.ExecutionAttemptId{VertexId: v.v.GetId(), SubtaskIndex: int32(st.index), AttemptNumber: int32(st.attempt)}
}

func (jm *JobMaster) submit(v *vertex, st *subtask) {
	e := jm.executors[st.slot.executor]
	if e == nil {
		jm.attemptFailed(v, st, "TaskExecutor "+st.slot.executor+" is not registered", "")
		return
	}
	req := &jobplanev1.SubmitTaskRequest{
		JobId: jm.cfg.JobID, JobMasterToken: protoToken(jm.cfg.Token), AllocationId: st.slot.allocationID,
		Attempt: jm.attemptID(v, st), TaskName: v.v.GetName(), Invokable: v.v.GetInvokable(),
		Config: v.v.GetConfig(), NumberOfSubtasks: v.v.GetParallelism(),
	}
	attempt := st.attempt
	jm.goRPC(func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err := e.client.SubmitTask(ctx, req)
		jm.post(func() { jm.submitted(v, st, attempt, err) })
	})
}

func (jm *JobMaster) submitted(v *vertex, st *subtask, attempt int, err error) {
	if st.attempt != attempt {
		return
	}
	unreachable := connect.CodeOf(err) == connect.CodeUnavailable
	if unreachable || apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_SLOT_NOT_ALLOCATED) || apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_SLOT_OCCUPIED) {
		// The slot is not (or not yet) ours to use, or its TaskExecutor
		// cannot be reached: drop it and deploy the subtask elsewhere,
		// without counting a failure. An unreachable TaskExecutor is lost
		// for good once its probes time out.
		if s := st.slot; s != nil {
			delete(jm.slots, s.allocationID)
			s.task, st.slot = nil, nil
		}
		if st.state == jobstatus.ExecDeploying {
			st.state = jobstatus.ExecCreated
		}
		if st.cancelOn {
			st.cancelOn = false
			st.state = jobstatus.ExecCanceled
		}
		jm.progress()
		return
	}
	if err != nil {
		jm.attemptFailed(v, st, "deployment failed: "+err.Error(), st.slot.executorID())
		return
	}
	if st.cancelOn {
		st.cancelOn = false
		jm.cancelAttempt(v, st)
	}
}

func (s *slotRef) executorID() string {
	if s == nil {
		return ""
	}
	return s.executor
}

// update applies a state reported by a TaskExecutor.
func (jm *JobMaster) update(status *jobplanev1.TaskExecutionStatus) error {
	a := status.GetAttempt()
	v, st := jm.find(a)
	if st == nil || st.attempt != int(a.GetAttemptNumber()) || jobstatus.IsExecTerminal(st.state) {
		return apierror.New(jobplanev1.ErrorReason_ERROR_REASON_EXECUTION_NOT_FOUND, "no such execution attempt", map[string]string{
			"job_id": jm.cfg.JobID, "vertex_id": a.GetVertexId(), "subtask_index": fmt.Sprint(a.GetSubtaskIndex()), "attempt_number": fmt.Sprint(a.GetAttemptNumber()),
		})
	}
	switch to := status.GetState(); {
	case to == st.state:
	case to == jobstatus.ExecFailed:
		jm.attemptFailed(v, st, status.GetFailureMessage(), st.slot.executorID())
	case to == jobstatus.ExecCanceled && st.state != jobstatus.ExecCanceling && !st.cancelOn:
		// Canceled without being asked to (the TaskExecutor stopped, say):
		// the attempt is lost like a failed one.
		jm.attemptFailed(v, st, "the attempt was canceled on TaskExecutor "+st.slot.executorID(), st.slot.executorID())
	case jobstatus.CanMoveExec(st.state, to):
		st.state, st.since = to, time.Now()
		if jobstatus.IsExecTerminal(to) {
			jm.attemptEnded(st)
		}
	}
	jm.progress()
	return nil
}

func (jm *JobMaster) find(a *jobplanev1.ExecutionAttemptId) (*vertex, *subtask) {
	for _, v := range jm.vertices {
		if v.v.GetId() == a.GetVertexId() {
			if i := int(a.GetSubtaskIndex()); i >= 0 && i < len(v.subtasks) {
				return v, v.subtasks[i]
			}
		}
	}
	return nil, nil
}

// attemptEnded releases the slot of an attempt that reached a terminal
// state, so another subtask may use it.
func (jm *JobMaster) attemptEnded(st *subtask) {
	if st.slot != nil {
		st.slot.task = nil
		st.slot = nil
	}
}

func (jm *JobMaster) attemptFailed(v *vertex, st *subtask, msg, executor string) {
	st.state = jobstatus.ExecFailed
	st.failure = &jobplanev1.FailureInfo{Message: msg, Time: timestamppb.Now(), Attempt: jm.attemptID(v, st), TaskExecutorId: executor}
	jm.attemptEnded(st)
	switch jm.status {
	case jobstatus.Running:
		jm.failure = st.failure
		jm.log.Info("task failed", "vertex", v.v.GetId(), "subtask", st.index, "attempt", st.attempt, "cause", msg)
		if delay, ok := jm.restart.next(time.Now()); ok {
			jm.setStatus(jobstatus.Restarting)
			jm.stopAll(jobstatus.Restarting)
			jm.scheduleRestart(delay)
		} else {
			jm.setStatus(jobstatus.Failing)
			jm.stopAll(jobstatus.Failed)
		}
	}
	jm.progress()
}

// stopAll cancels every running attempt; the job moves to end once all
// are terminal (see progress).
func (jm *JobMaster) stopAll(end jobplanev1.JobStatus) {
	jm.endStatus = end
	for _, v := range jm.vertices {
		for _, st := range v.subtasks {
			switch st.state {
			case jobstatus.ExecCreated, jobstatus.ExecScheduled:
				st.state = jobstatus.ExecCanceled
			case jobstatus.ExecDeploying:
				st.cancelOn = true
				jm.cancelAttempt(v, st)
			case jobstatus.ExecInitializing, jobstatus.ExecRunning:
				jm.cancelAttempt(v, st)
			}
		}
	}
}

// cancelAttempt asks the TaskExecutor to cancel an attempt; if it cannot
// be reached, the attempt counts as canceled.
func (jm *JobMaster) cancelAttempt(v *vertex, st *subtask) {
	if st.state != jobstatus.ExecDeploying {
		st.state = jobstatus.ExecCanceling
	}
	if st.slot == nil || jm.executors[st.slot.executor] == nil {
		st.state = jobstatus.ExecCanceled
		jm.attemptEnded(st)
		return
	}
	client := jm.executors[st.slot.executor].client
	req := &jobplanev1.CancelTaskRequest{JobId: jm.cfg.JobID, JobMasterToken: protoToken(jm.cfg.Token), Attempt: jm.attemptID(v, st)}
	attempt := st.attempt
	jm.goRPC(func(ctx context.Context) {
		// Retry a while: an attempt counts as canceled without the
		// TaskExecutor's word only once it cannot be reached at all.
		var err error
		for try := range 5 {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err = client.CancelTask(cctx, req)
			cancel()
			if err == nil || ctx.Err() != nil {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Duration(try+1) * 200 * time.Millisecond):
			}
		}
		jm.log.Warn("canceling an attempt failed; counting it as canceled", "vertex", v.v.GetId(), "subtask", st.index, "err", err)
		jm.post(func() {
			if st.attempt == attempt && !jobstatus.IsExecTerminal(st.state) {
				st.state = jobstatus.ExecCanceled
				jm.attemptEnded(st)
				jm.progress()
			}
		})
	})
}

func (jm *JobMaster) scheduleRestart(delay time.Duration) {
	jm.restartAt = time.AfterFunc(delay, func() {
		jm.post(func() {
			jm.restartAt = nil
			jm.progress()
		})
	})
}

// allStopped reports whether no attempt runs any more.
func (jm *JobMaster) allStopped() bool {
	for _, v := range jm.vertices {
		for _, st := range v.subtasks {
			if !jobstatus.IsExecTerminal(st.state) {
				return false
			}
		}
	}
	return true
}

// progress moves the job on when its attempts allow it.
func (jm *JobMaster) progress() {
	switch jm.status {
	case jobstatus.Running:
		finished := true
		for _, v := range jm.vertices {
			for _, st := range v.subtasks {
				finished = finished && st.state == jobstatus.ExecFinished
			}
		}
		if finished {
			jm.setStatus(jobstatus.Finished)
			return
		}
		jm.deploy()
		jm.trimSlots()
	case jobstatus.Failing, jobstatus.Cancelling:
		if jm.allStopped() {
			jm.setStatus(jm.endStatus)
		}
	case jobstatus.Restarting:
		if jm.allStopped() && jm.restartAt == nil {
			// A full restart: every subtask runs again with a new attempt.
			for _, v := range jm.vertices {
				for _, st := range v.subtasks {
					st.attempt++
					st.state = jobstatus.ExecCreated
					st.failure = nil
					st.cancelOn = false
					if st.slot != nil {
						st.slot.task, st.slot = nil, nil
					}
				}
			}
			jm.setStatus(jobstatus.Running)
			jm.deploy()
		}
	}
}

func (jm *JobMaster) cancelJob() {
	switch jm.status {
	case jobstatus.Created, jobstatus.Running, jobstatus.Failing, jobstatus.Restarting:
		if jm.restartAt != nil {
			jm.restartAt.Stop()
			jm.restartAt = nil
		}
		jm.setStatus(jobstatus.Cancelling)
		jm.stopAll(jobstatus.Canceled)
		jm.progress()
	}
}

// suspend stops the JobMaster without a result: its attempts are canceled
// and its slots freed, best effort and bounded.
func (jm *JobMaster) suspend() {
	if jm.restartAt != nil {
		jm.restartAt.Stop()
	}
	jm.log.Info("suspending")
	// Cancel every attempt at once, under one deadline.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	var wg sync.WaitGroup
	for _, v := range jm.vertices {
		for _, st := range v.subtasks {
			if st.slot == nil || jobstatus.IsExecTerminal(st.state) {
				continue
			}
			if e := jm.executors[st.slot.executor]; e != nil {
				req := &jobplanev1.CancelTaskRequest{JobId: jm.cfg.JobID, JobMasterToken: protoToken(jm.cfg.Token), Attempt: jm.attemptID(v, st)}
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, _ = e.client.CancelTask(ctx, req)
				}()
			}
		}
	}
	wg.Wait()
	cancel()
	jm.release(context.Background())
	if jm.cfg.OnStatus != nil {
		s := jm.summaryLocked()
		s.Status = jobstatus.Suspended
		jm.cfg.OnStatus(s)
	}
}

// trimSlots gives back idle slots the job no longer needs (their subtasks
// finished), so that other jobs can use them while this one runs.
func (jm *JobMaster) trimSlots() {
	excess := len(jm.slots) - jm.neededLocked()
	for aid, s := range jm.slots {
		if excess <= 0 {
			return
		}
		if s.task != nil {
			continue
		}
		delete(jm.slots, aid)
		excess--
		if e := jm.executors[s.executor]; e != nil {
			req := &jobplanev1.FreeSlotRequest{JobId: jm.cfg.JobID, JobMasterToken: protoToken(jm.cfg.Token), AllocationId: aid, Reason: "no longer needed"}
			jm.goRPC(func(ctx context.Context) {
				ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				if _, err := e.client.FreeSlot(ctx, req); err != nil {
					jm.log.Debug("freeing an idle slot", "allocation", aid, "err", err)
				}
			})
		}
	}
}

// release frees every slot and disconnects from the ResourceManager.
func (jm *JobMaster) release(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	token := protoToken(jm.cfg.Token)
	var wg sync.WaitGroup
	for _, s := range jm.slots {
		if e := jm.executors[s.executor]; e != nil {
			req := &jobplanev1.FreeSlotRequest{JobId: jm.cfg.JobID, JobMasterToken: token, AllocationId: s.allocationID, Reason: "job ended"}
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _ = e.client.FreeSlot(ctx, req)
			}()
		}
	}
	wg.Wait()
	jm.slots = map[string]*slotRef{}
	_, _ = jm.cfg.ResourceManager.DisconnectJobMaster(ctx, &jobplanev1.DisconnectJobMasterRequest{JobId: jm.cfg.JobID, JobMasterToken: token, Reason: "job ended"})
}

func (jm *JobMaster) summaryLocked() *jobplanev1.JobSummary {
	s := &jobplanev1.JobSummary{
		JobId: jm.cfg.JobID, Name: jm.cfg.Graph.GetName(), Status: jm.status,
		StatusTime: timestamppb.New(jm.statusTime), Restarts: int32(jm.restart.used), Failure: jm.failure,
	}
	if !jm.cfg.SubmitTime.IsZero() {
		s.SubmitTime = timestamppb.New(jm.cfg.SubmitTime)
	}
	if jobstatus.IsGloballyTerminal(jm.status) {
		s.EndTime = timestamppb.New(jm.statusTime)
	}
	counts := map[jobplanev1.ExecutionState]int32{}
	for _, v := range jm.vertices {
		for _, st := range v.subtasks {
			counts[st.state]++
		}
	}
	s.TaskCounts = stateCounts(counts)
	return s
}

func stateCounts(counts map[jobplanev1.ExecutionState]int32) []*jobplanev1.ExecutionStateCount {
	var out []*jobplanev1.ExecutionStateCount
	for state := jobplanev1.ExecutionState(1); int(state) < len(jobplanev1.ExecutionState_name); state++ {
		if n := counts[state]; n > 0 {
			out = append(out, &jobplanev1.ExecutionStateCount{State: state, Count: n})
		}
	}
	return out
}

func (jm *JobMaster) detailsLocked(full bool) *jobplanev1.JobDetails {
	d := &jobplanev1.JobDetails{Summary: jm.summaryLocked(), JobMasterToken: protoToken(jm.cfg.Token)}
	for _, v := range jm.vertices {
		vd := &jobplanev1.VertexDetails{VertexId: v.v.GetId(), Name: v.v.GetName(), Parallelism: v.v.GetParallelism()}
		counts := map[jobplanev1.ExecutionState]int32{}
		for _, st := range v.subtasks {
			counts[st.state]++
			if full {
				vd.Subtasks = append(vd.Subtasks, &jobplanev1.SubtaskDetails{
					SubtaskIndex: int32(st.index), AttemptNumber: int32(st.attempt), State: st.state,
					TaskExecutorId: st.slot.executorID(), Failure: st.failure,
				})
			}
		}
		vd.TaskCounts = stateCounts(counts)
		d.Vertices = append(d.Vertices, vd)
	}
	return d
}

func protoToken(t hastore.Token) *jobplanev1.FencingToken {
	return &jobplanev1.FencingToken{SessionId: t.SessionID, Epoch: t.Epoch}
}

// probeExecutors asks every registered TaskExecutor for the job's
// attempts on it.
func (jm *JobMaster) probeExecutors() {
	now := time.Now()
	for id, e := range jm.executors {
		if now.Sub(e.lastSeen) > jm.cfg.HeartbeatTimeout {
			jm.log.Warn("TaskExecutor stopped answering; its attempts are lost", "task_executor", id)
			jm.lostExecutor(id, "no heartbeat answer for "+jm.cfg.HeartbeatTimeout.String())
			continue
		}
		if e.probing {
			continue
		}
		e.probing = true
		req := &jobplanev1.TaskExecutorServiceHeartbeatRequest{JobId: jm.cfg.JobID, Token: protoToken(jm.cfg.Token)}
		sent := time.Now()
		jm.goRPC(func(ctx context.Context) {
			ctx, cancel := context.WithTimeout(ctx, jm.cfg.HeartbeatTimeout/2)
			defer cancel()
			resp, err := e.client.Heartbeat(ctx, req)
			jm.post(func() {
				e.probing = false
				if err == nil && jm.executors[id] == e {
					e.lastSeen = time.Now()
					jm.reconcile(id, sent, resp.GetTasks())
				}
			})
		})
	}
}

// reconcile compares the attempts a TaskExecutor reported, in answer to a
// probe sent at sent, with those the JobMaster placed there: a state
// change whose report was lost is applied, and an attempt the
// TaskExecutor no longer has is lost. Attempts whose state the JobMaster
// learnt after sending the probe are newer than the answer, and left
// alone.
func (jm *JobMaster) reconcile(executor string, sent time.Time, tasks []*jobplanev1.TaskExecutionStatus) {
	listed := map[string]*jobplanev1.TaskExecutionStatus{}
	for _, t := range tasks {
		a := t.GetAttempt()
		listed[fmt.Sprintf("%s/%d/%d", a.GetVertexId(), a.GetSubtaskIndex(), a.GetAttemptNumber())] = t
	}
	for _, v := range jm.vertices {
		for _, st := range v.subtasks {
			if st.slot == nil || st.slot.executor != executor || jobstatus.IsExecTerminal(st.state) || st.state == jobstatus.ExecDeploying || !st.since.Before(sent) {
				continue
			}
			t, ok := listed[fmt.Sprintf("%s/%d/%d", v.v.GetId(), st.index, st.attempt)]
			switch {
			case ok && t.GetState() != st.state && t.GetState() != jobstatus.ExecDeploying:
				_ = jm.update(t)
			case !ok:
				jm.attemptFailed(v, st, "TaskExecutor "+executor+" no longer runs the attempt", executor)
			}
		}
	}
}

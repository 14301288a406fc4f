package taskexecutor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	"github.com/jobplane/jobplane/gen/jobplane/cluster/v1/clusterv1connect"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
	"github.com/jobplane/jobplane/sdk/wire/jobtrace"
	"github.com/jobplane/jobplane/sdk/wire/taskvalue"
)

// Config configures a TaskExecutor.
type Config struct {
	// ID identifies the TaskExecutor for its lifetime. Default: random.
	ID string
	// Address is the base URL at which the TaskExecutor serves
	// TaskExecutorService. Required.
	Address string
	// Slots is the number of slots. Default: 1.
	Slots int
	// Store is where the ResourceManager's leadership is found: the
	// cluster's HA store (any hastore.Store), or electionrpc.Observer
	// following it over HAStoreService, which links no store backend.
	// Its ObserveLeader follows election.JobManager; a job's election is
	// read to check a JobMaster token that a JobMaster's own call brings:
	// with Leader where Store is also an election.Reader (both are), with
	// the first answer of ObserveLeader otherwise. Required.
	Store election.Observer
	// HTTPClient carries calls to the ResourceManager and JobMasters.
	// Required.
	HTTPClient connect.HTTPClient
	// Invokables are offered besides the built-ins (noop, sleep, fail,
	// count, and exec with AllowExec); a name given here replaces a
	// built-in.
	Invokables map[string]Invokable
	// AllowExec offers the built-in exec, which runs commands: whatever
	// commands any submitter that may reach the cluster's API asks for,
	// as this process's user unless Exec.Credential says otherwise.
	// Without it the TaskExecutor does not offer exec at all, so the
	// cluster neither places exec subtasks here nor (when no TaskExecutor
	// offers it) accepts a job that needs it. Default: false.
	AllowExec bool
	// Exec says where, as whom and with what environment exec runs
	// commands (see ExecConfig for its defaults); only read when
	// AllowExec is set.
	Exec ExecConfig
	// RetryInterval is the pause between attempts to reach the
	// ResourceManager. Default: 100ms.
	RetryInterval time.Duration
	// CancelGrace is how long a canceled task gets to stop before it is
	// killed (for exec, the time between SIGTERM and SIGKILL of its
	// process group). A TaskExecutor that has not heard from a job's
	// JobMaster for the JobMaster's heartbeat timeout has stopped that
	// job's tasks by then: it starts canceling them this long before (at
	// most half the timeout before). Default: DefaultCancelGrace.
	CancelGrace time.Duration
	// AttemptLog, if set, receives an AttemptRecord as a JSON line when an
	// execution attempt starts and when it stops running here. Default:
	// none.
	AttemptLog io.Writer
	// OutputBytes is how much of each execution attempt's output (see
	// Task.Logger and Task.Output) is kept: its last OutputBytes bytes,
	// served by GetTaskOutput. Default: DefaultOutputBytes; negative keeps
	// none (offsets still count every byte).
	OutputBytes int
	// OutputRetention is how long an attempt's output is kept after the
	// attempt ended. Default: DefaultOutputRetention in memory,
	// DefaultOutputDiskRetention with OutputDir; negative forgets it as
	// the attempt ends.
	OutputRetention time.Duration
	// OutputAttempts is how many ended attempts' outputs are kept at most;
	// the oldest are forgotten first. Default: DefaultOutputAttempts in
	// memory, no bound with OutputDir (OutputMaxBytes bounds them there);
	// negative keeps none.
	OutputAttempts int
	// MaxValueBytes is the largest value a task may return
	// (Task.SetValue); a task that finishes with a larger one FAILS with a
	// message that says so. It should be the cluster's
	// ServerLimits.max_task_value_bytes, which the JobMaster also
	// enforces. Default: taskvalue.DefaultMaxTaskValueBytes.
	MaxValueBytes int
	// MaxAccumulators is the most accumulator names a task may use
	// (Task.Add); a task that finishes with more FAILS. Default:
	// taskvalue.DefaultMaxAccumulators.
	MaxAccumulators int
	// OutputDir, if set, is the directory (created if need be) where the
	// attempts' outputs are kept, one file per segment of OutputBytes
	// bytes, instead of in memory: they outlive the process, and a
	// TaskExecutor that starts with the directory again (with the same
	// ID, for the cluster to find it) serves the outputs of the attempts
	// that ended before. Writes are buffered and never synced. Default:
	// none, outputs are kept in memory.
	OutputDir string
	// OutputMaxBytes bounds the bytes the outputs take in OutputDir (each
	// file counting for whole blocks of 4 KiB): beyond it, the outputs of
	// the attempts that ended first are removed first; running attempts
	// are never cut. Default: DefaultOutputMaxBytes. Ignored without
	// OutputDir.
	OutputMaxBytes int64
	// ClientOptions apply to the TaskExecutor's clients of the
	// ResourceManager and of JobMasters (interceptors, say).
	ClientOptions []connect.ClientOption
	// Logger receives the TaskExecutor's logs. Default: slog.Default().
	Logger *slog.Logger
}

// Validate reports whether the configuration can be used.
func (c Config) Validate() error {
	switch {
	case c.Address == "":
		return errors.New("taskexecutor: address is required")
	case c.Store == nil:
		return errors.New("taskexecutor: HA store is required")
	case c.HTTPClient == nil:
		return errors.New("taskexecutor: HTTP client is required")
	case c.Slots < 0:
		return errors.New("taskexecutor: slots must not be negative")
	case c.CancelGrace < 0:
		return errors.New("taskexecutor: cancel grace must not be negative")
	case c.MaxValueBytes < 0 || c.MaxAccumulators < 0:
		return errors.New("taskexecutor: value and accumulator limits must not be negative")
	case c.OutputMaxBytes < 0:
		return errors.New("taskexecutor: output max bytes must not be negative")
	}
	if c.AllowExec {
		return c.Exec.Validate()
	}
	return nil
}

// TaskExecutor runs tasks in slots. Serve its Handler, then Run it.
type TaskExecutor struct {
	cfg        Config
	execRoot   string // the default root of exec's directories, if used
	log        *slog.Logger
	invokables map[string]Invokable
	rm         rmFence // the ResourceManager's token
	attempts   *attemptLog
	outputs    *outputs

	mu    sync.Mutex
	slots []*slot
	// jobs are the jobs this TaskExecutor knows, with their JobMasters'
	// tokens; holding are those holding a slot here, the only ones the
	// watchdog looks at; idle lists, oldest first, jobs that hold none
	// (since they stopped, or since they became known), which are
	// forgotten idleJobMemory later (see forgetLocked).
	jobs    map[string]*job
	holding map[string]*job
	idle    []idleJob
	// ctx is the TaskExecutor's lifetime, under which tasks and offers
	// run: made in New, so that calls served before Run starts get it
	// too, and canceled when Run ends.
	ctx    context.Context
	cancel context.CancelFunc
	// stopped is set once Run is winding down: no more goroutines start.
	stopped bool

	jmClients sync.Map // address -> *jobMasterClient
	wg        sync.WaitGroup
	// offers are the slots waiting to be offered, by JobMaster; a key is
	// present while a sender runs for it (offer.go).
	offers map[jobMasterKey][]offeredSlot
	// reports are the state changes waiting to be reported, by JobMaster
	// address; an address is present while a sender runs for it
	// (report.go).
	reports map[string][]*pendingReport
	// wake makes the JobMaster watchdog look at the deadlines again.
	wake chan struct{}
	// links are the heartbeats with JobMaster processes, by address
	// (heartbeat.go); hbInterval is the shortest interval they asked for.
	links      map[string]*link
	hbInterval time.Duration
	hbWake     chan struct{} // the heartbeat interval shrank
	// slotVersion counts the changes of the slots, and rmVersion is the
	// version of the slot report the ResourceManager holds.
	slotVersion, rmVersion uint64
}

type slot struct {
	index        int
	allocationID string // empty when free
	jobID        string
	task         *task
	// freeing: the slot was freed while its attempt still ran; it stays
	// allocated, and the attempt listed, until the attempt has stopped.
	freeing bool
}

// job is what the TaskExecutor knows of a job: its newest JobMaster.
type job struct {
	token   election.Token
	address string
	// contact is when the job's current JobMaster was last heard: a call
	// from it, or the send time of a call to it that it answered.
	contact time.Time
	// timeout is the JobMaster's heartbeat timeout, learnt when this
	// TaskExecutor registered with it; zero before. The job's tasks stop
	// by contact + timeout (see watchdog.go).
	timeout time.Duration
	// leaseUntil, if set, is how long the JobMaster certainly leads, as
	// the last heartbeat answer granted: the job's tasks stop by then too.
	leaseUntil time.Time
	// offered is when the first offer to the current JobMaster since the
	// timeout was last unknown was sent (zero before): the JobMaster
	// heard this TaskExecutor no earlier, so a deployment that comes
	// before the offer's answer counts the first deadline from then.
	offered time.Time
	// provisional says timeout is an older JobMaster's, kept until the
	// current one's is learnt.
	provisional bool
	// held is the number of slots allocated to the job here, and
	// idleSince when it last fell to zero.
	held      int
	idleSince time.Time
	// taskLease, if set, is the task lease the last heartbeat answer that
	// vouched for the job granted: the job's tasks stop by contact +
	// taskLease, whatever the heartbeat timeout and leaseUntil say, and a
	// newer JobMaster holds the older one's attempts instead of canceling
	// them (see held.go).
	taskLease time.Duration
	// adoptedUntil is the latest deadline of the attempts the current
	// JobMaster adopted (AdoptAttempts): the job's tasks run at least
	// until then, as they would have under their older token.
	adoptedUntil time.Time
}

type task struct {
	req *clusterv1.SubmitTaskRequest
	// token is the JobMaster token the attempt runs under: the one it was
	// deployed under (deployed), or the newer one that adopted it.
	token    election.Token
	deployed election.Token
	// address is where its state changes are reported: its JobMaster's.
	address string
	// heldUntil, if set, says the attempt is held for a newer JobMaster
	// to adopt, and when it stops if none does (see held.go).
	heldUntil time.Time
	cancel    context.CancelFunc
	state     jobplanev1.ExecutionState
	failure   string // why it FAILED (or was canceled unasked), for probes that see the state first
	// stopCause says why the TaskExecutor canceled the attempt on its own,
	// reported as the failure message of its CANCELED state.
	stopCause string
	ended     bool // the invokable returned
	done      chan struct{}
	// ctx is the attempt's; it ends when the attempt is canceled or ends.
	ctx context.Context
	// snapshotFn is what the task registered to give its state
	// (Task.OnCheckpoint); snapshot is the latest checkpoint asked of it.
	snapshotFn SnapshotFunc
	snapshot   *snapshot
	// result is what the task returns (Task.SetValue, Task.Add); reported
	// only with its FINISHED state.
	result taskResult
}

// New returns a TaskExecutor for cfg.
func New(cfg Config) (*TaskExecutor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.ID == "" {
		var b [6]byte
		_, _ = rand.Read(b[:])
		cfg.ID = "te-" + hex.EncodeToString(b[:])
	}
	if cfg.Slots == 0 {
		cfg.Slots = 1
	}
	if cfg.RetryInterval == 0 {
		cfg.RetryInterval = 100 * time.Millisecond
	}
	if cfg.CancelGrace == 0 {
		cfg.CancelGrace = DefaultCancelGrace
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxValueBytes == 0 {
		cfg.MaxValueBytes = taskvalue.DefaultMaxTaskValueBytes
	}
	if cfg.MaxAccumulators == 0 {
		cfg.MaxAccumulators = taskvalue.DefaultMaxAccumulators
	}
	var execRoot string // the default root, removed when Run ends
	if cfg.Exec.Dir == "" {
		execRoot = filepath.Join(os.TempDir(), "jobplane-exec-"+pathSafe(cfg.ID))
		cfg.Exec.Dir = execRoot
	}
	inv := builtins(cfg.AllowExec, cfg.CancelGrace, cfg.Exec, cfg.MaxValueBytes)
	for name, f := range cfg.Invokables {
		inv[name] = f
	}
	outputs, err := openOutputs(cfg)
	if err != nil {
		return nil, err
	}
	te := &TaskExecutor{
		cfg:        cfg,
		execRoot:   execRoot,
		log:        cfg.Logger.With("task_executor", cfg.ID),
		invokables: inv,
		attempts:   newAttemptLog(cfg.AttemptLog),
		outputs:    outputs,
		jobs:       make(map[string]*job),
		holding:    make(map[string]*job),
		wake:       make(chan struct{}, 1),
		links:      make(map[string]*link),
		hbWake:     make(chan struct{}, 1),
		offers:     make(map[jobMasterKey][]offeredSlot),
		reports:    make(map[string][]*pendingReport),
	}
	te.ctx, te.cancel = context.WithCancel(context.Background())
	for i := range cfg.Slots {
		te.slots = append(te.slots, &slot{index: i})
	}
	return te, nil
}

// ID returns the TaskExecutor's id.
func (te *TaskExecutor) ID() string { return te.cfg.ID }

// Handler returns the URL path and HTTP handler of TaskExecutorService.
func (te *TaskExecutor) Handler(opts ...connect.HandlerOption) (string, http.Handler) {
	return clusterv1connect.NewTaskExecutorServiceHandler(&handler{te: te}, opts...)
}

func tokenOf(t *jobplanev1.FencingToken) election.Token {
	return election.Token{SessionID: t.GetSessionId(), Epoch: t.GetEpoch()}
}

func protoToken(t election.Token) *jobplanev1.FencingToken {
	return &jobplanev1.FencingToken{SessionId: t.SessionID, Epoch: t.Epoch}
}

// slotReport describes every slot; te.mu must be held.
func (te *TaskExecutor) slotReportLocked() *clusterv1.SlotReport {
	r := &clusterv1.SlotReport{}
	for _, s := range te.slots {
		r.Slots = append(r.Slots, &clusterv1.SlotStatus{SlotIndex: int32(s.index), AllocationId: s.allocationID, JobId: s.jobID})
	}
	return r
}

// adoptLocked records the JobMaster token t for jobID if it is not older
// than the known one, canceling the attempts of an older token. te.mu must
// be held.
func (te *TaskExecutor) adoptLocked(jobID string, t election.Token, address string) (current election.Token, ok bool) {
	j := te.jobs[jobID]
	if j == nil {
		// Holding nothing yet: forgotten in time unless it comes to.
		j = &job{idleSince: time.Now()}
		te.jobs[jobID] = j
		te.idle = append(te.idle, idleJob{jobID, j.idleSince})
	}
	switch {
	case t.Epoch < j.token.Epoch:
		return j.token, false
	case t.Epoch > j.token.Epoch:
		held := te.keepForAdoptionLocked(jobID, j)
		if !j.token.IsZero() && len(held) == 0 {
			te.log.Info("newer JobMaster; canceling the older one's attempts", "job", jobID, "old", j.token, "new", t)
		}
		for _, s := range te.slots {
			if s.jobID != jobID || held[s] {
				continue
			}
			var previous <-chan struct{}
			if s.task != nil && s.task.token != t {
				s.task.cancel()
				previous = s.task.done
			}
			if !j.token.IsZero() && address != "" {
				// The slot belongs to the job, not to the older JobMaster:
				// offer it to the newer one once its attempt has stopped
				// (it is freed if not taken).
				key, index, allocationID := jobMasterKey{jobID: jobID, address: address, token: t}, s.index, s.allocationID
				if previous == nil {
					te.queueOfferLocked(key, index, allocationID)
					continue
				}
				ctx := te.ctx
				te.goRunLocked(func() {
					select {
					case <-previous:
					case <-ctx.Done():
						return
					}
					te.mu.Lock()
					defer te.mu.Unlock()
					te.queueOfferLocked(key, index, allocationID)
				})
			}
		}
		// The older JobMaster's timeout bounds the slots the job holds
		// until the newer one's is learnt (registration, offer answer or
		// deployment), which replaces it.
		j.token, j.contact, j.leaseUntil, j.offered, j.provisional = t, time.Now(), time.Time{}, time.Time{}, j.timeout > 0
		// The newer JobMaster grants a task lease of its own, or none.
		j.taskLease, j.adoptedUntil = 0, time.Time{}
	}
	if address != "" {
		j.address = address
	}
	return j.token, true
}

// jobMasterClient is the TaskExecutor's client of the JobMasters at one
// address.
type jobMasterClient struct {
	clusterv1connect.JobMasterServiceClient
	// perJob is set once the address answered
	// UpdateTaskExecutionStatesOfJobs with UNIMPLEMENTED: state changes go
	// in one call per job there.
	perJob atomic.Bool
	// single is set once the address answered UpdateTaskExecutionStates
	// with UNIMPLEMENTED: state changes go one per call there.
	single atomic.Bool
	// separate is set once the address did not take a registration with
	// an offer: RegisterTaskExecutor goes first there.
	separate atomic.Bool
}

func (te *TaskExecutor) jobMaster(address string) *jobMasterClient {
	if c, ok := te.jmClients.Load(address); ok {
		return c.(*jobMasterClient)
	}
	c, _ := te.jmClients.LoadOrStore(address, &jobMasterClient{
		JobMasterServiceClient: clusterv1connect.NewJobMasterServiceClient(te.cfg.HTTPClient, address, te.cfg.ClientOptions...),
	})
	return c.(*jobMasterClient)
}

// goRunLocked runs f on a goroutine that Run waits for, unless Run is
// already winding down; te.mu must be held.
func (te *TaskExecutor) goRunLocked(f func()) {
	if te.stopped {
		return
	}
	te.wg.Add(1)
	go func() {
		defer te.wg.Done()
		f()
	}()
}

// releaseLocked frees slot s: at once if no attempt runs in it, else once
// its attempt, canceled now, has stopped, so that a slot never runs two
// attempts at once and a freed attempt stays visible until it stopped.
// cause, if set, says why the attempt was stopped. te.mu must be held.
func (te *TaskExecutor) releaseLocked(s *slot, cause string) {
	if t := s.task; t != nil && !t.ended {
		if cause != "" && t.stopCause == "" {
			t.stopCause = cause
		}
		t.cancel()
		s.freeing = true
		return
	}
	te.unholdLocked(s.jobID)
	s.allocationID, s.jobID, s.task, s.freeing = "", "", nil, false
	te.slotVersion++
}

// runTask runs an attempt and reports its states to the JobMaster that
// deployed it, for as long as that JobMaster's token is the job's. The
// invokable starts while its RUNNING report travels (as in Flink, the
// report does not hold the task back); the final report is delivered, or
// given up, before the attempt counts as done.
func (te *TaskExecutor) runTask(ctx context.Context, t *task, inv Invokable) {
	defer close(t.done)
	req := t.req
	a := req.GetAttempt()
	ctx, span := jobtrace.Start(ctx, trace.SpanContext{}, "jobplane.task", trace.WithAttributes(
		attribute.String("jobplane.job_id", req.GetJobId()), attribute.String("jobplane.vertex_id", a.GetVertexId()),
		attribute.Int("jobplane.subtask_index", int(a.GetSubtaskIndex())), attribute.Int("jobplane.attempt", int(a.GetAttemptNumber())),
		attribute.String("jobplane.invokable", req.GetInvokable()), attribute.String("jobplane.task_executor_id", te.cfg.ID),
		attribute.Int64("jobplane.token_epoch", int64(t.token.Epoch))))
	defer span.End()
	te.report(t, jobplanev1.ExecutionState_EXECUTION_STATE_RUNNING, "")
	te.attempts.record(te.cfg.ID, "start", t, 0)
	outKey := outputKeyOf(req.GetJobId(), req.GetAttempt())
	out := te.outputs.start(outKey)
	err := inv(ctx, Task{
		JobID: req.GetJobId(), VertexID: req.GetAttempt().GetVertexId(),
		SubtaskIndex: int(req.GetAttempt().GetSubtaskIndex()), Attempt: int(req.GetAttempt().GetAttemptNumber()),
		Subtasks: int(req.GetNumberOfSubtasks()), Config: req.GetConfig(),
		Logger: taskLogger(out), Output: out,
		Restored: stateOf(req.GetRestoredState()), RestoredFrom: req.GetRestoredFrom(),
		OnCheckpoint: func(fn SnapshotFunc) {
			te.mu.Lock()
			t.snapshotFn = fn
			te.mu.Unlock()
		},
		SetValue: func(v []byte) {
			v = append([]byte(nil), v...)
			te.mu.Lock()
			t.result.setValue(v)
			te.mu.Unlock()
		},
		Add: func(name string, delta int64) {
			te.mu.Lock()
			t.result.add(name, delta)
			te.mu.Unlock()
		},
	})
	te.outputs.finish(outKey, out)
	te.mu.Lock()
	cause := t.stopCause
	te.mu.Unlock()
	state, msg := jobplanev1.ExecutionState_EXECUTION_STATE_FINISHED, ""
	switch {
	case ctx.Err() != nil:
		state, msg = jobplanev1.ExecutionState_EXECUTION_STATE_CANCELED, cause
	case err != nil:
		state, msg = jobplanev1.ExecutionState_EXECUTION_STATE_FAILED, err.Error()
	default:
		te.mu.Lock()
		err = t.result.check(te.cfg.MaxValueBytes, te.cfg.MaxAccumulators)
		te.mu.Unlock()
		if err != nil {
			state, msg = jobplanev1.ExecutionState_EXECUTION_STATE_FAILED, err.Error()
		}
	}
	span.SetAttributes(attribute.String("jobplane.state", strings.TrimPrefix(state.String(), "EXECUTION_STATE_")))
	if state == jobplanev1.ExecutionState_EXECUTION_STATE_FAILED {
		span.SetStatus(codes.Error, msg)
	}
	// Recorded before the slot can take another attempt.
	te.attempts.record(te.cfg.ID, "stop", t, state)
	te.mu.Lock()
	t.ended = true
	for _, s := range te.slots {
		if s.task == t && s.freeing {
			te.releaseLocked(s, "") // freed while it ran: free now
		}
	}
	te.mu.Unlock()
	<-te.report(t, state, msg)
}

func isDone(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// Run registers with the ResourceManager leader and heart-beats there,
// following leader changes, until ctx ends; then it cancels every attempt
// and waits for them.
func (te *TaskExecutor) Run(ctx context.Context) error {
	defer func() {
		te.cancel() // offers and tasks, whenever they started
		te.mu.Lock()
		te.stopped = true
		for _, s := range te.slots {
			if s.task != nil {
				s.task.cancel()
			}
		}
		te.mu.Unlock()
		te.wg.Wait()
		if te.execRoot != "" {
			_ = os.Remove(te.execRoot) // only if empty: KeepDirs keeps it
		}
	}()

	te.mu.Lock()
	te.goRunLocked(func() { te.watchdog(ctx) })
	te.goRunLocked(func() { te.heartbeatJobMasters(ctx) })
	te.mu.Unlock()

	leaders := make(chan election.Leader, 1)
	observed := make(chan error, 1)
	// A call to the ResourceManager ends as soon as the leadership
	// changes: a leader that stands still (paused, cut off) must not hold
	// the TaskExecutor for the call's whole timeout while another leads.
	var (
		callMu     sync.Mutex
		cancelCall context.CancelFunc = func() {}
	)
	// Observing fails while the store cannot vouch for a leader (an etcd
	// member without a quorum fails its watches): the TaskExecutor keeps
	// its tasks to their deadlines and observes again, pausing 50ms,
	// doubling to 1s, while attempts keep failing.
	go func() {
		pause := 50 * time.Millisecond
		for {
			began := time.Now()
			err := te.cfg.Store.ObserveLeader(ctx, election.JobManager, func(info election.Leader) error {
				// Seen before it is followed: a call under an older
				// ResourceManager token is refused from now on.
				te.rm.observe(info)
				select {
				case <-leaders: // keep only the newest
				default:
				}
				leaders <- info
				callMu.Lock()
				cancelCall()
				callMu.Unlock()
				return nil
			})
			te.rm.lost()
			if ctx.Err() != nil {
				observed <- err
				return
			}
			if time.Since(began) > time.Second {
				pause = 50 * time.Millisecond // it had worked for a while
			}
			te.log.Warn("observing the ResourceManager's leader failed; observing again", "err", err, "pause", pause)
			select {
			case <-ctx.Done():
				observed <- ctx.Err()
				return
			case <-time.After(pause):
				pause = min(2*pause, time.Second)
			}
		}
	}()
	defer func() { <-observed }()

	var leader election.Leader
	var registration *clusterv1.ResourceManagerServiceRegisterTaskExecutorResponse
	var rm clusterv1connect.ResourceManagerServiceClient
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-observed: // only once ctx ended
			observed <- err
			return nil
		case leader = <-leaders:
			registration = nil
			timer.Reset(0)
			continue
		case <-timer.C:
		}
		if leader.Token.IsZero() || leader.Address == "" {
			continue // wait for a leader with an address
		}
		callMu.Lock()
		callCtx, cancel := context.WithCancel(ctx)
		cancelCall = cancel
		changed := len(leaders) > 0
		callMu.Unlock()
		if changed {
			cancel()
			continue // follow the new leader first
		}
		if registration == nil {
			// The ResourceManager serves the cluster protocol, which a
			// leader may serve apart from its public address.
			rm = clusterv1connect.NewResourceManagerServiceClient(te.cfg.HTTPClient, leader.Cluster(), te.cfg.ClientOptions...)
			var err error
			registration, err = te.register(callCtx, rm, leader.Token)
			if err != nil {
				cancel()
				te.log.Debug("registering with the ResourceManager failed", "leader", leader.Cluster(), "err", err)
				timer.Reset(te.cfg.RetryInterval)
				continue
			}
			te.log.Info("registered with the ResourceManager", "leader", leader.Cluster(), "token", leader.Token)
		}
		err := te.heartbeat(callCtx, rm, leader.Token, registration.GetRegistrationId())
		cancel()
		if err != nil {
			te.log.Debug("heartbeat to the ResourceManager failed", "err", err)
			if apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_NOT_REGISTERED) {
				registration = nil
			}
			timer.Reset(te.cfg.RetryInterval)
			continue
		}
		timer.Reset(max(registration.GetHeartbeatInterval().AsDuration(), 10*time.Millisecond))
	}
}

func (te *TaskExecutor) register(ctx context.Context, rm clusterv1connect.ResourceManagerServiceClient, token election.Token) (*clusterv1.ResourceManagerServiceRegisterTaskExecutorResponse, error) {
	te.mu.Lock()
	report := te.slotReportLocked()
	version := te.slotVersion
	te.rmVersion = 0 // a new registration holds the report sent with it
	te.mu.Unlock()
	names := make([]string, 0, len(te.invokables))
	for name := range te.invokables {
		names = append(names, name)
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := rm.RegisterTaskExecutor(rctx, &clusterv1.ResourceManagerServiceRegisterTaskExecutorRequest{
		TaskExecutorId: te.cfg.ID, Address: te.cfg.Address, ResourceManagerToken: protoToken(token),
		SlotReport: report, Invokables: names,
	})
	if err == nil {
		te.mu.Lock()
		te.rmVersion = version
		te.mu.Unlock()
	}
	return resp, err
}

// heartbeat sends one heartbeat to the ResourceManager: the slot report
// only when it changed since the version the ResourceManager holds. The
// answer names the JobMasters of jobs holding slots here as they change
// (after a failover, say); a newer one is followed, and offered the job's
// slots.
func (te *TaskExecutor) heartbeat(ctx context.Context, rm clusterv1connect.ResourceManagerServiceClient, token election.Token, registrationID string) error {
	req := &clusterv1.ResourceManagerServiceHeartbeatRequest{
		TaskExecutorId: te.cfg.ID, RegistrationId: registrationID, ResourceManagerToken: protoToken(token),
	}
	te.mu.Lock()
	req.SlotReportVersion = te.slotVersion
	if te.slotVersion != te.rmVersion {
		req.SlotReport = te.slotReportLocked()
	}
	te.mu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := rm.Heartbeat(rctx, req)
	if err != nil {
		return err
	}
	te.mu.Lock()
	defer te.mu.Unlock()
	te.rmVersion = resp.GetSlotReportVersion()
	for _, info := range resp.GetJobMasters() {
		jobID, ok := strings.CutPrefix(info.GetElection(), "job/")
		if !ok || info.GetAddress() == "" || !te.holdsLocked(jobID) {
			continue
		}
		if j := te.jobs[jobID]; j == nil || j.token.Epoch < info.GetToken().GetEpoch() || j.address == "" {
			te.adoptLocked(jobID, tokenOf(info.GetToken()), info.GetAddress())
		}
	}
	return nil
}

// holdsLocked reports whether the job holds a slot here; te.mu must be
// held.
func (te *TaskExecutor) holdsLocked(jobID string) bool {
	for _, s := range te.slots {
		if s.jobID == jobID {
			return true
		}
	}
	return false
}

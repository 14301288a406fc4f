package jobmaster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	"github.com/jobplane/jobplane/gen/jobplane/cluster/v1/clusterv1connect"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
	"github.com/jobplane/jobplane/sdk/wire/jobstatus"
	"github.com/jobplane/jobplane/sdk/wire/jobtrace"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/internal/scheduler"
)

// Config configures a JobMaster.
type Config struct {
	// JobID is the job's id. Required.
	JobID string
	// Graph is the job's execution plan, overrides applied. Required.
	Graph *jobplanev1.JobGraph
	// Token is the JobMaster's fencing token: its grant in "job/<id>".
	// Required.
	Token election.Token
	// Address is the base URL at which this process serves
	// JobMasterService. Required.
	Address string
	// ResourceManager is a client of the ResourceManager. Required.
	ResourceManager clusterv1connect.ResourceManagerServiceClient
	// SubmitTime is when the job was accepted.
	SubmitTime time.Time
	// RunID is the id of the run the JobMaster runs (the plan's run_id):
	// savepoint ids name it, as savepoints outlive the run and a later
	// run of the job id counts checkpoint ids from 1 again.
	RunID string
	// Router is the process's Router, which serves the job's calls and
	// the TaskExecutors' heartbeats, and keeps the job's deadlines.
	// Required.
	Router *Router
	// HeartbeatInterval is how often TaskExecutors heart-beat (told them
	// at registration). Default: 1s.
	HeartbeatInterval time.Duration
	// HeartbeatTimeout is how long a TaskExecutor may stay silent before
	// its attempts count as lost, and after which it stops the attempts of
	// a JobMaster it does not hear from. Default: 10s.
	HeartbeatTimeout time.Duration
	// TaskLease, if set, is the task lease the process's Router grants the
	// TaskExecutors (RouterConfig.TaskLease): the JobMaster then leaves its
	// running attempts to its successor when its leadership ends, counts
	// a lost TaskExecutor's attempts as running for the lease (not the
	// heartbeat timeout), and, with Adopt, adopts its predecessor's.
	// Every JobManager of a cluster must use the same. Default 0: none.
	TaskLease time.Duration
	// Adopt says the job may have attempts of an older JobMaster running
	// (it is not the first grant of a job this process just submitted):
	// under a TaskLease the JobMaster deploys nothing before it has asked
	// the TaskExecutors that follow it for them (AdoptAttempts), and
	// deploys a subtask no TaskExecutor listed only once the lease has
	// passed since it started (see adopt.go).
	Adopt bool
	// SlotTimeout is how long a region released for deployment may wait
	// for the slots it needs; then its deployment fails, which counts
	// against the restart strategy like a task failure. Default: 5m.
	SlotTimeout time.Duration
	// SlotYield is how long a job may hold idle slots while a region
	// waits for more before it gives them back, and then twice as long
	// each time it holds some again during the wait, so that jobs holding
	// part of what each needs do not wait for one another (see
	// yieldSlots). Default: DefaultSlotYield; negative: never.
	SlotYield time.Duration
	// Clock, if set, replaces the real clock for restart delays and the
	// restart strategy's failure times (tests drive restarts with it).
	// Liveness is always judged on the real monotonic clock.
	Clock Clock
	// Valid, if set, reports whether the JobMaster's leadership certainly
	// holds (hastore.Leadership.Valid). While it does not, the JobMaster
	// answers NOT_LEADER, deploys nothing, and stops as if its
	// leadership had ended.
	Valid func() bool
	// Leadership, if set, is the grant the JobMaster leads under, shown
	// to a ResourceManager of the same process when it registers
	// (hastore.WithLeadership), which then reads no store to check it.
	Leadership *hastore.Leadership
	// OnStatus, if set, is called from the goroutine handling the
	// JobMaster's events with the job's summary after every status
	// change, and after every restart that leaves the status as it was
	// (a restart of some of the job's regions: the summary's restart
	// count grew); it must not block.
	OnStatus func(*jobplanev1.JobSummary)
	// Logger receives the JobMaster's logs. Default: slog.Default().
	Logger *slog.Logger
	// Checkpoints, if set, is the HA store's checkpoint store: the job's
	// checkpoint config (JobConfig.checkpoints) is carried out, and every
	// subtask deployed starts from the job's latest completed checkpoint,
	// which a JobMaster with Adopt reads before it deploys anything (a
	// first JobMaster of a job has none to read). Nil: no checkpoints.
	Checkpoints hastore.Checkpoints
	// MaxInlineStateBytes is the largest state a subtask may give inline
	// in a checkpoint. Default: DefaultMaxInlineStateBytes.
	MaxInlineStateBytes int
	// MaxTaskValueBytes is the largest value one task may return; a
	// FINISHED attempt with a larger one fails. Default:
	// taskvalue.DefaultMaxTaskValueBytes.
	MaxTaskValueBytes int
	// MaxResultValueBytes bounds the sum of the values of the job's
	// subtasks; the job fails when a finished subtask's value takes them
	// over it. Default: taskvalue.DefaultMaxResultValueBytes.
	MaxResultValueBytes int
	// MaxAccumulators bounds the accumulator names the job's tasks use;
	// the job fails when a finished subtask takes them over it. Default:
	// taskvalue.DefaultMaxAccumulators.
	MaxAccumulators int
	// Trace, if valid, is the span context of the job's submission: the
	// JobMaster's spans (slot declarations, deployments) are its
	// children, and its calls carry that trace. Default: none (each span
	// a root).
	Trace trace.SpanContext
}

// logger is the JobMaster's logger: its lines name the job, the token
// (session@epoch) and, if the job's submission was traced, the trace. It
// is made for each line rather than kept: lines are few, and a logger
// kept per job costs every waiting job a few hundred bytes.
func (jm *JobMaster) logger() *slog.Logger {
	cfg := &jm.cfg
	if cfg.Trace.IsValid() {
		return cfg.Logger.With("job", cfg.JobID, "token", cfg.Token, "trace_id", cfg.Trace.TraceID().String())
	}
	return cfg.Logger.With("job", cfg.JobID, "token", cfg.Token)
}

// DefaultSlotYield is Config.SlotYield unless set.
const DefaultSlotYield = 5 * time.Second

// Result is how a JobMaster ended.
type Result struct {
	// Status is FINISHED, FAILED or CANCELED, or SUSPENDED when the
	// JobMaster stopped without a result (its leadership ended).
	Status jobplanev1.JobStatus
	// Failure is the root cause of a FAILED job; nil otherwise.
	Failure *jobplanev1.FailureInfo
	// Exceptions are the failures that restarted or failed the job, most
	// recent first (at most maxExceptions).
	Exceptions []*jobplanev1.FailureInfo
	// Restarts counts the restarts under this JobMaster.
	Restarts int
	// Placements are where the job's attempts were deployed, for a job
	// that ended (FINISHED, FAILED or CANCELED); nil otherwise.
	Placements *Placements
	// Values are the values the subtasks whose attempt FINISHED returned,
	// in JobGraph vertex order, then subtask index (JobResult.values), for
	// a job that ended; nil otherwise.
	Values []*jobplanev1.SubtaskValue
	// Accumulators sums, per name, the accumulators of the subtasks
	// whose attempt FINISHED (JobResult.accumulators), for a job that
	// ended; nil otherwise.
	Accumulators map[string]int64
	// Final is the job's details as they stood once every attempt had
	// reached its final state, for a job that ended (FINISHED, FAILED or
	// CANCELED); nil otherwise.
	Final *Final
}

// maxExceptions bounds a job's exception history.
const maxExceptions = 16

// Clock is the time source for restart delays and the restart strategy.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f on its own goroutine after d; stop cancels it.
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) AfterFunc(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }

// JobMaster runs one job under one fencing token. Create it with New, Start
// it, and route its job's JobMasterService calls to Handle.
type JobMaster struct {
	cfg   Config
	clock Clock
	// The JobMaster's events (calls, reports, deadlines) wait in queue
	// and are handled one at a time, in order, by whichever goroutine
	// drains it; draining is set while one does. No goroutine is kept
	// while nothing happens: a job waiting for slots holds none.
	mu       sync.Mutex
	queue    []func()
	draining bool
	stopped  bool
	done     chan struct{} // closed once stopped
	// ended are the placements of a JobMaster that stopped with the
	// job's end, from which Locate answers from then on.
	ended    *Placements
	runCtx   context.Context
	onExit   func(Result)
	stopWake func() bool // stops the wake-up at the end of runCtx
	// halted is set by Stop: the JobMaster stops as at the end of runCtx.
	halted atomic.Bool

	// Owned by the draining goroutine.
	status     jobplanev1.JobStatus
	statusTime time.Time
	failure    *jobplanev1.FailureInfo   // the most recent failure
	exceptions []*jobplanev1.FailureInfo // failures that restarted or failed the job, most recent first
	vertices   []vertexTimes             // by vertex index
	restart    restartPolicy
	graph      *scheduler.ExecutionGraph
	vertexByID map[string]int
	eager      bool
	tasks      []task      // by execution vertex: its current attempt's runtime
	placed     []Placement // by execution vertex: its latest deployed attempt
	// earlier holds, by execution vertex, where its earlier attempts went,
	// oldest first (at most maxPlacements-1); only for those that ran more
	// than once.
	earlier    map[int32][]Placement
	live       int         // execution vertices deployed and not yet terminal
	ready      []int       // released regions with vertices waiting for slots
	queued     []bool      // by region: in ready
	since      []time.Time // by region: when it started waiting for slots
	failovers  []*failover
	restarting []*failover         // by region: the failover that restarts it
	slots      map[string]*slotRef // by allocation id
	executors  map[string]*executorRef
	orphans    map[orphanKey]time.Time // attempts that may still run, since when
	asked      map[string]time.Time    // TaskExecutor id -> when a complete report was asked for
	orphaned   []int32                 // by execution vertex: its orphans
	gone       map[string]*gone        // lost TaskExecutors, by id
	dropped    map[string]string       // allocation id -> TaskExecutor id of slots given up
	endStatus  jobplanev1.JobStatus    // the status to reach once every attempt is terminal
	// answer, while an offer that takes deployments in its answer is
	// handled, collects them (see submit).
	answer *offerAnswer
	// yieldArmed: a yieldSlots is due after yieldDelay, which doubles
	// with each yield and starts over when a region deploys.
	yieldArmed bool
	yieldDelay time.Duration
	// Declarations to the ResourceManager.
	declaring      bool                                    // one is in flight
	declared       int                                     // the slots it took last; -1 before the first
	rmRegistered   bool                                    // the ResourceManager took the registration
	rmToken        atomic.Pointer[jobplanev1.FencingToken] // the ResourceManager's, as its registration answered
	retryDeclare   func() bool                             // stops a pending retry; nil if none
	declareBackoff time.Duration
	// rpcCtx bounds the JobMaster's own calls (goRPC): it is made by the
	// first of them, and dropped once none is in flight (inFlight), so
	// that a waiting job keeps none; calls are cut off when the JobMaster
	// stops (or Start's context ends), cutOff from then on. rpcs tracks
	// the calls so none outlives the JobMaster. rpcCtx, cancelRPCs and
	// inFlight are guarded by mu.
	rpcCtx     context.Context
	cancelRPCs context.CancelFunc
	inFlight   int
	cutOff     atomic.Bool
	rpcs       sync.WaitGroup
	// adopting is set while the JobMaster still looks for its
	// predecessor's attempts (read by the Router); adoptAsked are the
	// TaskExecutors asked meanwhile.
	adopting atomic.Bool
	// adoptAnswered are the TaskExecutors that answered AdoptAttempts
	// for the job during the adoption.
	adoptAnswered map[string]bool
	adoptMu       sync.Mutex
	adoptAsked    map[string]bool // guarded by adoptMu
	// ckpt is the checkpoint coordinator; nil when the job keeps none, or
	// has no periodic checkpoints and has not yet asked for a savepoint.
	// noCheckpoints: the store turned out to keep none.
	ckpt          *coordinator
	noCheckpoints bool
	// results are the totals of the task results kept (result.go).
	results results
	// firstDeploy, if set, runs once, when the JobMaster first deploys
	// an attempt (OnFirstDeploy).
	firstDeploy func()
	// waitingSince, until the first deployment, is when the job started
	// waiting for slots before the JobMaster existed (WaitingSince).
	waitingSince time.Time
}

// task is the runtime of an execution vertex's current attempt; the
// attempt number and state live in the ExecutionGraph.
type task struct {
	slot     *slotRef
	failure  *jobplanev1.FailureInfo
	cancelOn bool         // cancel once its deployment returns
	canceled bool         // the JobMaster asked its TaskExecutor to cancel it
	answered *answerBatch // deployed in an offer's answer, not yet confirmed
	since    time.Time    // when the JobMaster last learnt the attempt's state
	// value and accums are what the attempt returned, once FINISHED
	// (result.go); a restart of the subtask drops them.
	value     []byte
	valueSize int // the value's share of the job's bound (result.go)
	accums    map[string]int64
}

type slotRef struct {
	allocationID string
	executor     string
	index        int
	ev           int32 // the execution vertex using the slot, or -1
}

// New returns a JobMaster for cfg; nothing runs until Start.
func New(cfg Config) (*JobMaster, error) {
	switch {
	case cfg.JobID == "" || cfg.Graph == nil || cfg.Token.IsZero() || cfg.Address == "":
		return nil, errors.New("jobmaster: job id, graph, token and address are required")
	case cfg.ResourceManager == nil:
		return nil, errors.New("jobmaster: a ResourceManager client is required")
	case cfg.Router == nil:
		return nil, errors.New("jobmaster: a Router is required")
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
	if cfg.SlotTimeout <= 0 {
		cfg.SlotTimeout = 5 * time.Minute
	}
	if cfg.SlotYield == 0 {
		cfg.SlotYield = DefaultSlotYield
	}
	if cfg.Clock == nil {
		cfg.Clock = realClock{}
	}
	eager := cfg.Graph.GetConfig().GetSchedulingMode() == jobplanev1.SchedulingMode_SCHEDULING_MODE_EAGER
	graph, err := scheduler.NewExecutionGraph(cfg.Graph, eager)
	if err != nil {
		return nil, fmt.Errorf("jobmaster: %w", err)
	}
	jm := &JobMaster{
		cfg:        cfg,
		clock:      cfg.Clock,
		done:       make(chan struct{}),
		status:     jobplanev1.JobStatus_JOB_STATUS_CREATED,
		restart:    restartPolicy{strategy: cfg.Graph.GetConfig().GetRestartStrategy()},
		graph:      graph,
		vertexByID: make(map[string]int, len(cfg.Graph.GetVertices())),
		eager:      eager,
		tasks:      make([]task, graph.Subtasks()),
		placed:     make([]Placement, graph.Subtasks()),
		vertices:   make([]vertexTimes, len(cfg.Graph.GetVertices())),
		queued:     make([]bool, graph.Regions()),
		since:      make([]time.Time, graph.Regions()),
		yieldDelay: cfg.SlotYield,
		restarting: make([]*failover, graph.Regions()),
		orphaned:   make([]int32, graph.Subtasks()),
		declared:   -1,
	}
	jm.statusTime = time.Now()
	for i, v := range cfg.Graph.GetVertices() {
		jm.vertexByID[v.GetId()] = i
	}
	return jm, nil
}

// setKey sets m[k] to v, making the map first if it is nil: a JobMaster's
// maps are made on their first entry, since most jobs wait, and a waiting
// job keeps none of them.
func setKey[K comparable, V any](m *map[K]V, k K, v V) {
	if *m == nil {
		*m = make(map[K]V)
	}
	(*m)[k] = v
}

// OnFirstDeploy sets f to run once, on the JobMaster's goroutine, when it
// first deploys or adopts an attempt: its job has slots from then on. It
// must be called before Start.
func (jm *JobMaster) OnFirstDeploy(f func()) { jm.firstDeploy = f }

// holdsSlots notes that the job deployed or adopted attempts: its wait
// for slots is over, and the first-deployment hook runs.
func (jm *JobMaster) holdsSlots() {
	jm.waitingSince = time.Time{}
	if f := jm.firstDeploy; f != nil {
		jm.firstDeploy = nil
		f()
	}
}

// WaitingSince says that the job has waited for slots since t, before
// this JobMaster existed (in its Dispatcher's admission window): until
// its first deployment, a region's wait for slots counts from t, so that
// the slot timeout bounds the job's whole wait. It must be called before
// Start.
func (jm *JobMaster) WaitingSince(t time.Time) { jm.waitingSince = t }

// Token returns the JobMaster's fencing token.
func (jm *JobMaster) Token() election.Token { return jm.cfg.Token }

// valid reports whether the JobMaster's leadership certainly holds.
func (jm *JobMaster) valid() bool { return jm.cfg.Valid == nil || jm.cfg.Valid() }

// do runs f among the JobMaster's events and waits for it; it fails with
// NOT_LEADER once the JobMaster has stopped. f runs even if ctx ends
// first (nobody waits for it then).
func (jm *JobMaster) do(ctx context.Context, f func()) error {
	return jm.begin(f)(ctx)
}

// notLeader is the error of a call to a JobMaster that has stopped.
func (jm *JobMaster) notLeader() error {
	return apierror.NotLeader(election.Job(jm.cfg.JobID), "")
}

// begin queues f among the JobMaster's events, as do does, and returns
// what waits for it: a caller with several JobMasters to ask queues with
// each before it waits for any.
func (jm *JobMaster) begin(f func()) (wait func(ctx context.Context) error) {
	ran := make(chan struct{})
	if !jm.push(func() { f(); close(ran) }) {
		return func(context.Context) error { return jm.notLeader() }
	}
	return func(ctx context.Context) error {
		select {
		case <-ran:
			return nil
		case <-jm.done:
			return jm.notLeader()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// post queues f among the JobMaster's events without waiting; it is
// dropped once the JobMaster has stopped, or its calls were cut off. The
// queue has no bound: a poster never waits for a busy JobMaster (the
// Router's goroutines post for every JobMaster of the process), and what
// is queued is bounded by what is in flight for the job (its calls,
// reports and deadlines).
func (jm *JobMaster) post(f func()) {
	if jm.cutOff.Load() {
		return
	}
	jm.push(f)
}

// push queues f and, unless a goroutine drains the queue already,
// starts one; it reports false once the JobMaster has stopped.
func (jm *JobMaster) push(f func()) bool {
	jm.mu.Lock()
	if jm.stopped {
		jm.mu.Unlock()
		return false
	}
	jm.queue = append(jm.queue, f)
	start := !jm.draining && jm.runCtx != nil
	if start {
		jm.draining = true
	}
	jm.mu.Unlock()
	if start {
		go jm.drain()
	}
	return true
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

// Summary returns the job's current summary as the JobMaster sees it.
func (jm *JobMaster) Summary(ctx context.Context) (*jobplanev1.JobSummary, error) {
	var s *jobplanev1.JobSummary
	err := jm.do(ctx, func() { s = jm.summaryLocked() })
	return s, err
}

// Details returns the job's details as the JobMaster sees them; with
// full, the subtasks of page, and the offset of the next page (-1 after
// the last).
func (jm *JobMaster) Details(ctx context.Context, full bool, page Page) (*jobplanev1.JobDetails, int, error) {
	var (
		d    *jobplanev1.JobDetails
		next int
	)
	err := jm.do(ctx, func() { d, next = jm.detailsLocked(full, page) })
	return d, next, err
}

// Start runs the job until it is globally terminal, passing its result to
// onExit, or until ctx ends (the leadership is lost) or Stop is called,
// passing SUSPENDED after canceling its attempts and freeing its slots. It
// returns once the JobMaster has nothing left to do for now; onExit is
// called on the goroutine that ends the JobMaster, which may be the
// caller's, before Start returns. Between events no goroutine is kept: the
// first steps and the events queued meanwhile are handled on the caller's
// goroutine, and an event (a call, a report, a deadline, the end of ctx)
// queued while none is handling them starts a goroutine, which handles
// every event queued while it runs and returns once the queue is empty.
func (jm *JobMaster) Start(ctx context.Context, onExit func(Result)) {
	jm.mu.Lock()
	jm.runCtx, jm.onExit, jm.draining = ctx, onExit, true
	jm.mu.Unlock()
	// Calls still in flight when the JobMaster stops are cut off and
	// waited for (finish), so that no late declaration or deployment acts
	// for it. The end of ctx wakes it.
	jm.stopWake = context.AfterFunc(ctx, jm.wake)
	jm.setStatus(jobstatus.Running)
	jm.initCheckpoints()
	if jm.cfg.Adopt && jm.cfg.TaskLease > 0 {
		jm.beginAdoption()
	}
	jm.enqueue(jm.graph.Release()...)
	jm.declare()
	jm.drain()
}

// Stop stops the JobMaster as the end of Start's context does: its calls
// in flight are cut off, and it suspends the job (SUSPENDED). It may be
// called from any goroutine, at any time, more than once. A runner that
// stops its JobMaster when its own context ends calls it there (through
// context.AfterFunc) rather than deriving the JobMaster's context from
// both: a context that ends with either costs every waiting job a few
// hundred bytes.
func (jm *JobMaster) Stop() {
	jm.halted.Store(true)
	jm.wake()
}

// wake cuts off the calls in flight of a JobMaster that is to stop, and
// wakes it to stop.
func (jm *JobMaster) wake() {
	jm.stopRPCs()
	jm.push(func() {})
}

// ending reports whether the JobMaster is to stop: Start's context ended,
// or Stop was called.
func (jm *JobMaster) ending() bool { return jm.halted.Load() || jm.runCtx.Err() != nil }

// drain handles queued events until none is left, or the JobMaster stops.
// Nothing here wakes on its own: every event is a call, a report, or a
// deadline of something pending (a restart delay, a region's wait for
// slots, a declaration to retry).
func (jm *JobMaster) drain() {
	ctx := jm.runCtx
	for {
		if jobstatus.IsGloballyTerminal(jm.status) {
			jm.stopRPCs()
			jm.rpcs.Wait()
			jm.stopFailovers()
			jm.stopCheckpoints()
			jm.release(context.WithoutCancel(ctx), false)
			res := Result{Status: jm.status, Restarts: jm.restart.used, Exceptions: jm.exceptions, Placements: jm.placements(), Final: jm.final(),
				Values: jm.resultValues(), Accumulators: jm.resultAccumulators()}
			if jm.status == jobstatus.Failed {
				res.Failure = jm.failure
			}
			jm.finish(res)
			return
		}
		if ending := jm.ending(); ending || !jm.valid() {
			if !ending {
				// The lease may have expired while this process stood
				// still: stop as if the leadership had ended (it ends
				// shortly).
				jm.logger().Warn("leadership no longer certain; suspending")
			}
			jm.stopRPCs()
			jm.rpcs.Wait()
			jm.stopCheckpoints()
			jm.suspend()
			jm.finish(Result{Status: jobstatus.Suspended, Restarts: jm.restart.used})
			return
		}
		jm.mu.Lock()
		if len(jm.queue) == 0 {
			jm.queue, jm.draining = nil, false
			jm.mu.Unlock()
			return
		}
		f := jm.queue[0]
		jm.queue[0] = nil
		jm.queue = jm.queue[1:]
		jm.mu.Unlock()
		if jm.ending() || !jm.valid() {
			continue // the leadership ended: act no more
		}
		f()
		jm.declare()
	}
}

// finish stops the JobMaster: no event is taken any more, calls in flight
// were cut off and waited for, and onExit gets the result.
func (jm *JobMaster) finish(res Result) {
	jm.stopWake()
	jm.stopRPCs()
	jm.rpcs.Wait()
	jm.mu.Lock()
	jm.stopped, jm.queue, jm.ended = true, nil, res.Placements
	jm.mu.Unlock()
	close(jm.done)
	jm.onExit(res)
}

// declare tells the ResourceManager how many slots the job needs, when
// that changed since the last declaration it took, one declaration at a
// time. The ResourceManager runs in this process and keeps what it was
// told while this JobMaster lives (a new ResourceManager leader means a
// new JobMaster), so nothing is declared again unless a call failed; a
// failed call is retried after a backoff.
func (jm *JobMaster) declare() {
	needed := jm.neededLocked()
	if jm.declaring || jm.retryDeclare != nil || needed == jm.declared {
		return
	}
	jm.declaring = true
	invokables := jm.invokables()
	register := !jm.rmRegistered
	jm.goRPC(func(ctx context.Context) {
		ctx, span := jobtrace.Start(ctx, trace.SpanContext{}, "jobplane.slots.declare",
			trace.WithAttributes(attribute.String("jobplane.job_id", jm.cfg.JobID), attribute.Int("jobplane.slots", needed)))
		err := jm.connectResourceManager(ctx, register, needed, invokables)
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
		if err != nil && ctx.Err() == nil {
			jm.logger().Debug("declaring to the ResourceManager failed; will retry", "err", err, "backoff", jm.declareBackoff)
		}
		jm.post(func() {
			jm.declaring = false
			if err != nil {
				jm.rmRegistered = false
				jm.declareBackoff = min(max(2*jm.declareBackoff, 50*time.Millisecond), 5*time.Second)
				jm.retryDeclare = jm.cfg.Router.after(jm.declareBackoff, func() {
					jm.post(func() {
						jm.retryDeclare = nil
						jm.declare()
					})
				})
				return
			}
			jm.rmRegistered, jm.declared, jm.declareBackoff = true, needed, 0
			if jm.status == jobstatus.Running {
				jm.trimSlots() // slots held back until the ResourceManager knew
			}
		})
	})
}

// goRPC runs a call on its own goroutine under the JobMaster's RPC
// context, which is cut off and waited for when the JobMaster stops. f
// must not use ctx once it returns.
func (jm *JobMaster) goRPC(f func(ctx context.Context)) {
	jm.mu.Lock()
	if jm.rpcCtx == nil {
		ctx := context.Background()
		if jm.cfg.Trace.IsValid() {
			ctx = trace.ContextWithSpanContext(ctx, jm.cfg.Trace)
		}
		jm.rpcCtx, jm.cancelRPCs = context.WithCancel(ctx)
		if jm.cutOff.Load() {
			jm.cancelRPCs()
		}
	}
	ctx := jm.rpcCtx
	jm.inFlight++
	jm.mu.Unlock()
	jm.rpcs.Add(1)
	go func() {
		defer jm.rpcs.Done()
		defer jm.rpcDone()
		f(ctx)
	}()
}

// rpcDone counts a call of goRPC's as ended; the RPC context is dropped
// with the last call in flight (the calls' WithTimeout children leave a
// context they derived from with a children map and a done channel, kept
// for as long as it is).
func (jm *JobMaster) rpcDone() {
	jm.mu.Lock()
	if jm.inFlight--; jm.inFlight == 0 {
		jm.cancelRPCs()
		jm.rpcCtx, jm.cancelRPCs = nil, nil
	}
	jm.mu.Unlock()
}

// stopRPCs cuts off the calls in flight and those made from now on.
func (jm *JobMaster) stopRPCs() {
	jm.mu.Lock()
	jm.cutOff.Store(true)
	if jm.cancelRPCs != nil {
		jm.cancelRPCs()
	}
	jm.mu.Unlock()
}

// neededLocked is the number of slots the job can use now (a slot runs
// one attempt at a time): one per unfinished subtask of the regions
// released for deployment.
func (jm *JobMaster) neededLocked() int {
	if jm.status != jobstatus.Running && jm.status != jobstatus.Restarting {
		return 0
	}
	return jm.graph.Demand()
}

func (jm *JobMaster) invokables() []string {
	seen := map[string]bool{}
	var out []string
	for _, v := range jm.cfg.Graph.GetVertices() {
		if name := v.GetInvokable(); !seen[name] {
			seen[name] = true
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// connectResourceManager registers the JobMaster, unless it is
// registered already, and declares its needs.
func (jm *JobMaster) connectResourceManager(ctx context.Context, register bool, needed int, invokables []string) error {
	token := protoToken(jm.cfg.Token)
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if register {
		if jm.cfg.Leadership != nil {
			rctx = hastore.WithLeadership(rctx, jm.cfg.Leadership)
		}
		resp, err := jm.cfg.ResourceManager.RegisterJobMaster(rctx, &clusterv1.RegisterJobMasterRequest{
			JobId: jm.cfg.JobID, JobMasterAddress: jm.cfg.Address, JobMasterToken: token,
		})
		if err != nil {
			return err
		}
		jm.rmToken.Store(resp.GetResourceManagerToken())
	}
	_, err := jm.cfg.ResourceManager.DeclareResourceRequirements(rctx, &clusterv1.DeclareResourceRequirementsRequest{
		JobId: jm.cfg.JobID, JobMasterToken: token, ResourceManagerToken: jm.rmToken.Load(),
		Requirements: []*clusterv1.ResourceRequirement{{Slots: int32(needed), Invokables: invokables}},
	})
	return err
}

func (jm *JobMaster) setStatus(to jobplanev1.JobStatus) {
	next, err := jobstatus.Move(jm.status, to)
	if err != nil {
		jm.logger().Error("refusing an illegal status change", "err", err)
		return
	}
	jm.logger().Info("job status", "from", jm.status, "to", next)
	jm.status, jm.statusTime = next, time.Now()
	if jm.cfg.OnStatus != nil {
		jm.cfg.OnStatus(jm.summaryLocked())
	}
}

// enqueue queues released regions for deployment.
func (jm *JobMaster) enqueue(regions ...int) {
	for _, r := range regions {
		if !jm.queued[r] {
			jm.queued[r] = true
			jm.ready = append(jm.ready, r)
			jm.waitForSlots(r)
		}
	}
}

// waitForSlots starts a region's wait for its slots, bounded by the slot
// timeout on the process's deadline timer.
func (jm *JobMaster) waitForSlots(r int) {
	since := time.Now()
	if !jm.waitingSince.IsZero() {
		since = jm.waitingSince
	}
	jm.since[r] = since
	jm.cfg.Router.after(max(jm.cfg.SlotTimeout-time.Since(since), 0), func() {
		jm.post(func() { jm.slotTimedOut(r, since) })
	})
}

// setState records a new state of ev's current attempt and keeps the
// counts of live attempts, job-wide and per failover, up to date.
func (jm *JobMaster) setState(ev int32, to jobplanev1.ExecutionState) {
	from := jm.graph.State(ev)
	if from == to {
		return
	}
	jm.enqueue(jm.graph.SetState(ev, to)...)
	now := time.Now()
	jm.tasks[ev].since = now
	vi, _ := jm.graph.VertexOf(ev)
	jm.vertices[vi].moved(to, now)
	switch wasLive, isLive := isLive(from), isLive(to); {
	case wasLive && !isLive:
		jm.live--
		if f := jm.restarting[jm.graph.RegionOf(ev)]; f != nil {
			f.live--
		}
	case !wasLive && isLive:
		jm.live++
		if f := jm.restarting[jm.graph.RegionOf(ev)]; f != nil {
			f.live++
		}
	}
	if jobstatus.IsExecTerminal(to) {
		jm.attemptEnded(ev)
		jm.abortCheckpointOf(ev, to)
	}
	if to == jobstatus.ExecRunning {
		jm.checkpointRunning()
	}
}

// isLive reports whether an attempt in state s was deployed and has not
// stopped.
func isLive(s jobplanev1.ExecutionState) bool {
	return s != jobstatus.ExecCreated && !jobstatus.IsExecTerminal(s)
}

// update applies states reported by a TaskExecutor, in order, and then
// moves the job on; it returns the refusal of each (nil if taken).
//
// A report is taken only from the TaskExecutor the attempt is deployed to:
// a copy left on another one (after an unclear deployment) is refused,
// and its TaskExecutor then stops it.
func (jm *JobMaster) update(executor string, statuses ...*jobplanev1.TaskExecutionStatus) []error {
	errs := make([]error, len(statuses))
	for i, st := range statuses {
		errs[i] = jm.apply(executor, st)
	}
	jm.progress()
	return errs
}

// apply applies one state reported by a TaskExecutor (see update); the
// caller moves the job on (progress) afterwards.
func (jm *JobMaster) apply(executor string, status *jobplanev1.TaskExecutionStatus) error {
	a := status.GetAttempt()
	ev := jm.find(a)
	if ev >= 0 && jobstatus.IsExecTerminal(status.GetState()) {
		if key := (orphanKey{ev, int(a.GetAttemptNumber()), executor}); jm.isOrphan(key) {
			jm.resolve(key)
		}
	}
	if ev < 0 || jm.graph.Attempt(ev) != int(a.GetAttemptNumber()) || jobstatus.IsExecTerminal(jm.graph.State(ev)) ||
		jm.tasks[ev].slot == nil || jm.tasks[ev].slot.executor != executor {
		return apierror.New(jobplanev1.ErrorReason_ERROR_REASON_EXECUTION_NOT_FOUND, "no such execution attempt", map[string]string{
			"job_id": jm.cfg.JobID, "vertex_id": a.GetVertexId(), "subtask_index": fmt.Sprint(a.GetSubtaskIndex()), "attempt_number": fmt.Sprint(a.GetAttemptNumber()),
		})
	}
	jm.confirmed(ev)
	t := &jm.tasks[ev]
	switch from, to := jm.graph.State(ev), status.GetState(); {
	case to == from:
	case to == jobstatus.ExecFailed:
		msg := truncate(status.GetFailureMessage())
		if msg == "" {
			msg = "the attempt failed on TaskExecutor " + t.slot.executorID() + " (no cause given)"
		}
		jm.attemptFailed(ev, msg, t.slot.executorID())
	case to == jobstatus.ExecCanceled && from != jobstatus.ExecCanceling && !t.cancelOn && !t.canceled:
		// Canceled without being asked to (the TaskExecutor stopped, or
		// stopped hearing from this JobMaster): the attempt is lost like a
		// failed one. An attempt asked to cancel while it was DEPLOYING
		// stays DEPLOYING until a state comes (see cancelAttempt): its
		// CANCELED is the answer, not a loss.
		msg := "the attempt was canceled on TaskExecutor " + t.slot.executorID()
		if why := truncate(status.GetFailureMessage()); why != "" {
			msg += ": " + why
		}
		jm.attemptFailed(ev, msg, t.slot.executorID())
	case to == jobstatus.ExecFinished && jobstatus.CanMoveExec(from, to):
		jm.finished(ev, status, t.slot.executorID())
	case jobstatus.CanMoveExec(from, to):
		jm.setState(ev, to)
	}
	return nil
}

// attemptEnded releases the slot of an attempt that reached a terminal
// state, so another subtask may use it.
func (jm *JobMaster) attemptEnded(ev int32) {
	t := &jm.tasks[ev]
	if t.slot != nil {
		t.slot.ev = -1
		t.slot = nil
	}
}

// progress moves the job on when its attempts allow it.
func (jm *JobMaster) progress() {
	switch jm.status {
	case jobstatus.Running, jobstatus.Restarting:
		jm.restartDue()
		if jm.status != jobstatus.Running {
			return
		}
		if jm.graph.Finished() {
			jm.setStatus(jobstatus.Finished)
			return
		}
		jm.deploy()
		jm.trimSlots()
	case jobstatus.Failing, jobstatus.Cancelling:
		if jm.live == 0 {
			jm.setStatus(jm.endStatus)
		}
	}
}

func (jm *JobMaster) cancelJob() {
	switch jm.status {
	case jobstatus.Created, jobstatus.Running, jobstatus.Failing, jobstatus.Restarting:
		jm.setStatus(jobstatus.Cancelling)
		jm.stopAll(jobstatus.Canceled)
		jm.progress()
	}
}

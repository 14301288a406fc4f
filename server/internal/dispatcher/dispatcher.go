// Package dispatcher is the Dispatcher: the cluster's entry point for
// jobs. While its process leads the election "jobmanager", it accepts
// submissions (validated, idempotent by job id, persisted before anything
// runs), starts a runner per job, records each job's result when the job
// ends (dirty, then cleanup, then clean), and on gaining leadership finishes
// pending cleanups and recovers every persisted job.
//
// It holds no durable state of its own: the HA store is the truth, and
// the in-memory job table is rebuilt from it on every grant.
package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/jobgraph"
	"github.com/jobplane/jobplane/sdk/wire/jobstatus"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/internal/jobmaster"
	"github.com/jobplane/jobplane/server/internal/runner"
	"github.com/jobplane/jobplane/server/internal/telemetry"
)

// JobRunner runs one job; runner.Runner is the implementation.
type JobRunner interface {
	// Start runs the job until it has a result or ctx ends, and then
	// calls done, never on the caller's goroutine before Start returns
	// (the caller may hold locks done takes); it keeps no goroutine while
	// the job merely waits.
	Start(ctx context.Context, done func(jobmaster.Result, error))
	Cancel(ctx context.Context) jobplanev1.JobStatus
	JobMaster() *jobmaster.JobMaster
}

var _ JobRunner = (*runner.Runner)(nil)

// Jobs persists submitted jobs and starts the runs of jobs; the
// JobManager implements it, under its HA-store session.
type Jobs interface {
	// PersistPlan persists a submitted job's plan, as
	// Store.PutExecutionPlan does and failing as it fails, and, if lead
	// is set, may enter the job's election in the same write
	// (Session.PutExecutionPlanAndLead): granted is then the job's
	// leadership, which its runner takes as its first grant; nil, the
	// runner campaigns.
	PersistPlan(ctx context.Context, f hastore.Fence, plan *hastorev1.ExecutionPlan, lead bool) (granted *hastore.Leadership, err error)
	// NewRunner creates the runner of a job, submitted (with the
	// leadership PersistPlan granted, if any) or recovered; onStatus
	// receives the job's status changes. A recovered job's runner returns
	// an error wrapping runner.ErrJobMasterInit if its JobMaster cannot be
	// created, and the Dispatcher then steps down.
	NewRunner(plan *hastorev1.ExecutionPlan, recovered bool, granted *hastore.Leadership, onStatus func(*jobplanev1.JobSummary)) (JobRunner, error)
}

// TaskExecutors tells the Dispatcher of the cluster's registered
// TaskExecutors; the JobManager implements it from its ResourceManager.
type TaskExecutors interface {
	// ListTaskExecutors lists up to n registered TaskExecutors after the
	// id after, in id order, and whether more follow.
	ListTaskExecutors(after string, n int) ([]*jobplanev1.TaskExecutorInfo, bool)
	// TaskExecutorAddress returns the address of a registered
	// TaskExecutor, where GetTaskOutput asks for its output.
	TaskExecutorAddress(id string) (address string, ok bool)
	// SlotOverview counts the TaskExecutors and their slots, for
	// GetClusterOverview.
	SlotOverview() (taskExecutors, slotsTotal, slotsAvailable int)
	// JobsHoldingSlots returns the ids of the jobs that hold slots on
	// the registered TaskExecutors, by their slot reports: a new leader
	// starts their runners first.
	JobsHoldingSlots() []string
	// NotOffered returns the indexes of the vertices whose invokable no
	// registered TaskExecutor offers, in increasing order, with every
	// invokable the registered TaskExecutors offer, sorted; both nil when
	// all are offered or no TaskExecutor is registered. SubmitJob refuses
	// a new job that names one (see NotOfferedError).
	NotOffered(vertices []*jobplanev1.JobVertex) (missing []int, offered []string)
}

// Config configures a Dispatcher.
type Config struct {
	// Store is the HA store. Required.
	Store hastore.Store
	// Jobs persists submitted jobs' plans and creates jobs' runners.
	// Required.
	Jobs Jobs
	// Limits bound submitted JobGraphs.
	Limits jobgraph.Limits
	// MaxJobs bounds the cluster's live jobs (submitted and not yet
	// globally terminal), and MaxClusterSubtasks their subtasks in all: a
	// new job that would go over either is refused with a *LimitError; a
	// resubmission of an existing job is answered as always. Recovered
	// jobs count, even over the limits. Zero: no limit (the default).
	MaxJobs, MaxClusterSubtasks int
	// AdmissionWindow bounds the jobs launched at once that wait for
	// their first slots: each has its runner, its leadership and its
	// JobMaster. A job submitted or recovered past it waits for a seat in
	// the order it came, costing only its record (runner.Gate); it is
	// launched once a launched job first deploys or ends, and at once if
	// it is canceled. Jobs that hold slots when a leader takes over are
	// launched past it. Default: DefaultAdmissionWindow; negative: no
	// window.
	AdmissionWindow int
	// MaxRequestBytes and MaxResponseBytes are the limits of the endpoint
	// that serves the Dispatcher, reported by GetClusterOverview; zero when
	// unknown.
	MaxRequestBytes, MaxResponseBytes int64
	// ParallelismOverrides are the cluster's, applied before a job's own.
	ParallelismOverrides map[string]int32
	// Address is the base URL at which this process serves, reported as
	// the leader's address by GetClusterOverview.
	Address string
	// TaskExecutors, if set, tells of the cluster's TaskExecutors, for
	// ListTaskExecutors, GetClusterOverview, GetTaskOutput and the check
	// of a new job's invokables. Without it, the cluster has none (and no
	// job is refused for its invokables).
	TaskExecutors TaskExecutors
	// HTTPClient and ClientOptions carry GetTaskOutput's calls to
	// TaskExecutors.
	HTTPClient    connect.HTTPClient
	ClientOptions []connect.ClientOption
	// OutputRetention is how long where an ended job's attempts ran is
	// kept in memory, with the job's graph, for GetTaskOutput; after it,
	// the placements kept with the job's result serve (without the graph
	// to check a vertex against). Default: DefaultOutputRetention.
	OutputRetention time.Duration
	// OutputSubtasks bounds the subtasks of the ended jobs whose
	// placements are kept: beyond it, the oldest are forgotten first.
	// Default: DefaultOutputSubtasks.
	OutputSubtasks int
	// DetailsRetention is how long an ended job's final details (its
	// vertices, subtasks and plan, as its JobMaster left them) are kept
	// for GetJob, from when the job ended under this leader; after it,
	// GetJob answers with the summary and the exception history alone.
	// Negative keeps none. Default: DefaultDetailsRetention.
	DetailsRetention time.Duration
	// DetailsSubtasks bounds the subtasks of the ended jobs whose final
	// details are kept: beyond it, the oldest are forgotten first.
	// Default: DefaultDetailsSubtasks.
	DetailsSubtasks int
	// PersistTimeout bounds persisting a plan, whatever the client's
	// deadline, so that a submission's outcome is always known. Default:
	// 10s.
	PersistTimeout time.Duration
	// Timings are the process's timings that GetClusterOverview
	// advertises beside the Dispatcher's own. Default: zero, which a
	// server that conforms never advertises.
	Timings Timings
	// ResultRetention, when positive, deletes clean job results older
	// than it; their job ids may then be used again. Default: 0, keep
	// results for ever.
	ResultRetention time.Duration
	// Logger receives the Dispatcher's logs. Default: slog.Default().
	Logger *slog.Logger
}

// Dispatcher accepts and tracks jobs while it leads.
type Dispatcher struct {
	cfg Config
	log *slog.Logger

	mu   sync.Mutex
	lead *leadership // nil while not leading
}

// leadership is the Dispatcher's state under one grant.
type leadership struct {
	l     *hastore.Leadership
	ctx   context.Context
	ready chan struct{} // closed once recovery finished
	// accepting is closed once the results are recorded, before the
	// plans are: submissions are taken from then on (Submit), each id
	// not yet recorded looked up in the store while recovering is set.
	accepting chan struct{}
	// recovering holds the recovered jobs' starts while recovery reads
	// the plans; nil before and after. d.mu guards it.
	recovering *recoveredStarts
	// held, while a scan recovers the jobs from a store that also reads
	// plans by id (hastore.PlanReader), takes the ids of jobs holding
	// slots that Hurry did not find, for readHolders; nil otherwise. d.mu
	// guards it.
	held chan []string
	jobs map[string]*job
	// index holds the accepted jobs of jobs, ordered and counted by
	// status for GetClusterOverview and ListJobs.
	index *jobIndex
	wg    sync.WaitGroup // runners that have not called back
	// gate is the term's admission window (Config.AdmissionWindow).
	gate *runner.Gate
	// placed lists the ended jobs whose placements are kept, oldest
	// first, and placedSubtasks counts their subtasks (output.go).
	placed         []endedPlacements
	placedSubtasks int
	// finals lists the ended jobs whose final details are kept, oldest
	// first, and finalSubtasks counts the subtasks of those still kept
	// (ended.go).
	finals        []endedDetails
	finalSubtasks int
	// liveJobs and liveSubtasks count the live jobs and their subtasks,
	// for the cluster limits (clusterlimit.go).
	liveJobs, liveSubtasks int
	// awaiting are the recovered jobs holding slots whose runners started
	// first and have not reported a JobMaster's status (or ended) yet;
	// settled is closed once none is left (launch).
	awaiting map[string]bool
	settled  chan struct{}
}

// settleLocked notes that job id's runner reported, or ended; d.mu must
// be held.
func (ld *leadership) settleLocked(id string) {
	if !ld.awaiting[id] {
		return
	}
	delete(ld.awaiting, id)
	if len(ld.awaiting) == 0 {
		close(ld.settled)
		ld.awaiting = nil
	}
}

// job is the Dispatcher's record of one job.
type job struct {
	id string
	// runID tells this run of the id from its others (the plan's and the
	// result's run_id).
	runID  string
	digest []byte
	name   string
	// submitNanos is the job's submission time (submitted), and
	// statusNanos when its first summary's status began, in Unix
	// nanoseconds.
	submitNanos, statusNanos int64
	// owner is the principal that submitted the job (empty when
	// authentication was off): only it may submit the job's id again.
	owner string
	// persisting is closed once the job's plan is persisted (or the
	// submission failed and the job removed); concurrent submissions of the
	// same job wait for it.
	persisting chan struct{}
	runner     JobRunner
	// history holds the job's recent changes (history.go), none while a
	// job made by newJob has not changed: its first summary is built when
	// asked for (hist), so that a waiting job keeps no summary (issue 33).
	// changed, if a
	// watcher made it (changedLocked), is closed at the next change, to
	// wake watchers. A job nobody watches keeps no channel.
	history history
	changed chan struct{}
	result  *jobplanev1.JobResult // set once globally terminal
	// done, if a waiter made it (doneLocked), is closed once the result
	// is recorded.
	done chan struct{}
	// cancellation is the run's recorded cancel request, as the store
	// keeps it (the first one's); nil before one is recorded.
	cancellation *jobplanev1.Cancellation
	// purging is set, and closed once done, while the job's result is
	// being removed from the store (PurgeJob, or a submission that
	// reuses the id): others that would remove it or reuse the id wait
	// for it, then look again.
	purging chan struct{}
	// placements is where the job's attempts ran once it ended, for a
	// while (output.go). Its plan is not kept: its runner and JobMaster
	// have it, and a job waiting for a seat keeps none (runner.Config's
	// Plan).
	placements *jobmaster.Placements
	// final is the job's details as its JobMaster left them when it
	// ended, for a while (ended.go).
	final *jobmaster.Final

	heartbeatTimeout time.Duration
	heartbeat        *time.Timer
	// trace is the span context of the job's submission, if it was
	// submitted to this leader with a valid one (span): its runner's
	// spans are its children. A pointer, nil without one: a job submitted
	// untraced does not carry a SpanContext's 64 bytes (issue 33).
	trace *trace.SpanContext

	// indexed and indexedStatus belong to the leadership's jobIndex: whether
	// the job is in it, and under which status.
	indexed bool
	// live says that the job counts against the cluster limits, with
	// subtasks subtasks (clusterlimit.go).
	live          bool
	indexedStatus jobplanev1.JobStatus
	subtasks      int
}

// span returns the span context of the job's submission (job.trace), or
// the invalid one.
func (j *job) span() trace.SpanContext {
	if j.trace == nil {
		return trace.SpanContext{}
	}
	return *j.trace
}

// ErrNotLeading is returned while the Dispatcher does not lead.
var ErrNotLeading = errors.New("dispatcher: not the leader")

// New returns a Dispatcher for cfg.
func New(cfg Config) (*Dispatcher, error) {
	if cfg.Store == nil || cfg.Jobs == nil {
		return nil, errors.New("dispatcher: store and jobs are required")
	}
	if cfg.PersistTimeout == 0 {
		cfg.PersistTimeout = 10 * time.Second
	}
	if cfg.OutputRetention == 0 {
		cfg.OutputRetention = DefaultOutputRetention
	}
	if cfg.OutputSubtasks == 0 {
		cfg.OutputSubtasks = DefaultOutputSubtasks
	}
	if cfg.DetailsRetention == 0 {
		cfg.DetailsRetention = DefaultDetailsRetention
	}
	if cfg.DetailsSubtasks == 0 {
		cfg.DetailsSubtasks = DefaultDetailsSubtasks
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.AdmissionWindow == 0 {
		cfg.AdmissionWindow = DefaultAdmissionWindow
	}
	return &Dispatcher{cfg: cfg, log: cfg.Logger.With("component", "dispatcher")}, nil
}

// DefaultAdmissionWindow is the default of Config.AdmissionWindow: enough
// launched jobs to take the slots a cluster frees while the next ones
// launch (a campaign and a JobMaster each), few enough that a pile of
// waiting jobs costs little.
const DefaultAdmissionWindow = 1024

// Lead serves as the Dispatcher under l until ctx ends (normally l's
// context): it finishes dirty cleanups, recovers persisted jobs, and then
// accepts submissions. When it returns, every runner has stopped and every
// running job is suspended; plans stay in the store.
func (d *Dispatcher) Lead(ctx context.Context, l *hastore.Leadership) error {
	// The term ends with ctx, or early if recovery fails: either way the
	// runners stop before Lead returns.
	ctx, endTerm := context.WithCancel(ctx)
	defer endTerm()
	ld := &leadership{l: l, ctx: ctx, ready: make(chan struct{}), accepting: make(chan struct{}), jobs: make(map[string]*job), index: newJobIndex(),
		gate: runner.NewGate(max(d.cfg.AdmissionWindow, 0))}
	d.mu.Lock()
	d.lead = ld
	d.mu.Unlock()
	d.log.Info("leading", "token", l.Token())
	defer func() {
		endTerm()
		ld.gate.Close() // the jobs waiting for a seat suspend
		d.mu.Lock()
		d.lead = nil
		d.mu.Unlock()
		ld.wg.Wait()
		d.log.Info("no longer leading", "token", l.Token())
	}()
	starts, err := d.recover(ctx, ld)
	d.mu.Lock()
	ld.recovering = nil // starts is whole: no submission adds to it now
	d.mu.Unlock()
	if err != nil {
		over := ctx.Err() != nil // the term ended; the recovery did not fail
		endTerm()
		d.launch(nil, starts) // each suspends at once: the term is over
		if over {
			return nil
		}
		return fmt.Errorf("dispatcher: recovery: %w", err)
	}
	close(ld.ready)
	if n := len(starts.order); n > 0 {
		start := time.Now()
		held := d.launch(ld, starts)
		d.log.Info("started the recovered jobs", "jobs", n, "holding_slots_first", held, "took", time.Since(start).Round(time.Millisecond))
	}
	if d.cfg.ResultRetention <= 0 {
		<-ctx.Done()
		return nil
	}
	ticker := time.NewTicker(min(max(d.cfg.ResultRetention/4, 10*time.Millisecond), time.Minute))
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
			d.expireResults(ctx, ld)
		}
	}
}

// expireResults deletes the clean results older than the retention.
func (d *Dispatcher) expireResults(ctx context.Context, ld *leadership) {
	entries, err := d.cfg.Store.ListJobResultEntries(ctx, hastorev1.JobResultState_JOB_RESULT_STATE_CLEAN, "", 0)
	if err != nil {
		d.log.Warn("listing results for retention", "err", err)
		return
	}
	cutoff := time.Now().Add(-d.cfg.ResultRetention)
	for _, e := range entries {
		res := e.GetResult()
		if !res.GetEndTime().AsTime().Before(cutoff) {
			continue
		}
		// The listed result may be gone already, its id used by a newer
		// run (PurgeJob, ALLOW_DUPLICATE): the store deletes by job id,
		// so only the run this leader holds as the id's, not being
		// removed otherwise, is deleted, and purging keeps the id from
		// being reused meanwhile.
		d.mu.Lock()
		j := ld.jobs[res.GetJobId()]
		if j != nil && (j.result == nil || j.runID != res.GetRunId() || j.purging != nil) {
			d.mu.Unlock()
			continue
		}
		if j != nil {
			j.purging = make(chan struct{})
		}
		d.mu.Unlock()
		var err error
		if j != nil {
			err = d.removeResult(ld, j)
		} else {
			err = d.cfg.Store.DeleteJobResultEntry(ctx, ld.l.Fence(), res.GetJobId())
		}
		if err != nil {
			d.log.Warn("deleting an expired result", "job", res.GetJobId(), "err", err)
			continue
		}
		d.log.Info("deleted an expired job result", "job", res.GetJobId())
	}
}

// current returns the leadership once its recovery is done, waiting for
// it; ErrNotLeading if there is none, or if it no longer certainly holds
// (see hastore.Leadership.Valid).
func (d *Dispatcher) current(ctx context.Context) (*leadership, error) {
	return d.currentAfter(ctx, func(ld *leadership) chan struct{} { return ld.ready })
}

// currentAfter is current, waiting for the channel of the leadership that
// stage returns rather than for its recovery.
func (d *Dispatcher) currentAfter(ctx context.Context, stage func(*leadership) chan struct{}) (*leadership, error) {
	d.mu.Lock()
	ld := d.lead
	d.mu.Unlock()
	if ld == nil {
		return nil, ErrNotLeading
	}
	select {
	case <-stage(ld):
	case <-ld.ctx.Done():
		return nil, ErrNotLeading
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if err := d.stillLeading(ld); err != nil {
		return nil, err
	}
	return ld, nil
}

// stillLeading returns ErrNotLeading unless ld is the current leadership
// and certainly holds. Every answer is checked with it just before it
// leaves: a request that waited out a pause of this process, during which
// another process took over, is never answered as leader.
func (d *Dispatcher) stillLeading(ld *leadership) error {
	d.mu.Lock()
	current := d.lead == ld
	d.mu.Unlock()
	if !current || !ld.l.Valid() {
		return ErrNotLeading
	}
	return nil
}

// recover finishes the cleanup of every dirty result, then records every
// persisted plan without a result as a job, and returns what starts their
// runners, in id order (see launch). The runners start only once the
// jobs are all known, so that the leader answers for every job (and
// takes submissions) without waiting for a hundred thousand runners to
// start; each of starts must be called, even after an error.
func (d *Dispatcher) recover(ctx context.Context, ld *leadership) (*recoveredStarts, error) {
	f := ld.l.Fence()
	starts := &recoveredStarts{fns: make(map[string]startFunc)}
	entries, err := d.cfg.Store.ListJobResultEntries(ctx, hastorev1.JobResultState_JOB_RESULT_STATE_UNSPECIFIED, "", 0)
	if err != nil {
		return starts, err
	}
	for _, e := range entries {
		res := e.GetResult()
		if e.GetState() == hastorev1.JobResultState_JOB_RESULT_STATE_DIRTY {
			d.log.Info("finishing the cleanup of a terminated job", "job", res.GetJobId())
			d.cleanup(ctx, f, res.GetJobId(), nil)
		}
		j := &job{
			id: res.GetJobId(), runID: res.GetRunId(), cancellation: res.GetCancellation(), digest: res.GetPlanDigest(), name: res.GetName(),
			submitNanos: res.GetSubmitTime().AsTime().UnixNano(), result: res, owner: res.GetSubmittedBy(),
			persisting: persisted,
		}
		j.history = newHistory(summaryOfResult(res))
		d.mu.Lock()
		ld.jobs[j.id] = j
		ld.index.add(j)
		d.mu.Unlock()
	}
	// Every id that has a result is known: submissions are taken from
	// here on, an id not recorded yet looked up in the store (lookUp).
	d.mu.Lock()
	ld.recovering = starts
	d.mu.Unlock()
	close(ld.accepting)
	if scanner, ok := d.cfg.Store.(hastore.PlanScanner); ok {
		return starts, d.recoverScanned(ctx, ld, scanner, starts)
	}
	ids, err := d.cfg.Store.ListExecutionPlans(ctx, "", 0)
	if err != nil {
		return starts, err
	}
	// Each job's plan and cancel flag are read ahead, recoveryReads at a
	// time, and the jobs are recorded in the listed order as their reads
	// come in: with thousands of jobs, one read after another would keep
	// the last job waiting for seconds.
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	reads := d.readAhead(rctx, ids, func(id string) bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		_, known := ld.jobs[id]
		return known // it has a result: never run again
	})
	for _, r := range reads {
		select {
		case <-r.done:
		case <-ctx.Done():
			return starts, ctx.Err()
		}
		switch {
		case r.skip || errors.Is(r.err, hastore.ErrPlanNotFound):
			continue
		case r.err != nil:
			return starts, r.err
		}
		d.mu.Lock()
		if _, known := ld.jobs[r.plan.GetJobId()]; known {
			d.mu.Unlock()
			continue // a submission looked it up meanwhile (lookUp)
		}
		err := d.recoverJobLocked(ld, r.plan, r.cancellation, starts)
		d.mu.Unlock()
		if err != nil {
			return starts, err
		}
	}
	return starts, nil
}

// recoverScanned is recover's record of every persisted plan without a
// result, for a store that reads plans a page at a time.
func (d *Dispatcher) recoverScanned(ctx context.Context, ld *leadership, scanner hastore.PlanScanner, starts *recoveredStarts) error {
	start, recovered := time.Now(), 0
	// The jobs holding slots are read ahead of the scan where the store
	// can: their tasks are adopted within their task lease only if their
	// JobMasters start in time, and a scan of a hundred thousand plans
	// takes longer.
	if reader, ok := d.cfg.Store.(hastore.PlanReader); ok && d.cfg.TaskExecutors != nil {
		held := make(chan []string, heldBacklog)
		rctx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		d.mu.Lock()
		ld.held = held
		d.mu.Unlock()
		wg.Go(func() { d.readHolders(rctx, ld, reader, starts, held) })
		defer func() {
			d.mu.Lock()
			ld.held = nil
			d.mu.Unlock()
			stop()
			wg.Wait()
		}()
	}
	yield := launchHold
	for after := ""; ; {
		if err := d.yieldToHolders(ctx, ld, &yield); err != nil {
			return err
		}
		page, err := scanner.ScanExecutionPlans(ctx, after, recoveryPage)
		if err != nil {
			return err
		}
		// A page's jobs are recorded under one hold of the lock; those
		// holding slots start at once (awaitLocked), their tasks waiting
		// to be adopted within the task lease.
		holding := d.jobsHoldingSlots(ld)
		d.mu.Lock()
		for _, p := range page {
			if _, known := ld.jobs[p.Plan.GetJobId()]; known {
				continue // it has a result (never run again), or a submission looked it up (lookUp)
			}
			if err := d.recoverJobLocked(ld, p.Plan, p.Cancellation, starts); err != nil {
				d.mu.Unlock()
				return err
			}
		}
		early := ld.awaitLocked(starts, holding)
		d.mu.Unlock()
		for _, start := range early {
			start()
		}
		recovered += len(page)
		if len(page) < recoveryPage {
			d.log.Info("recovered the jobs", "plans", recovered, "took", time.Since(start).Round(time.Millisecond))
			return nil
		}
		after = page[len(page)-1].Plan.GetJobId()
	}
}

// yieldToHolders waits, before the scan reads its next page, until the
// recovered jobs holding slots whose runners started have reported
// (settleLocked), within what is left of budget: on a small machine the
// scan's work would slow their campaigns, and their tasks wait to be
// adopted within the task lease, while the jobs still to be read only
// wait for slots.
func (d *Dispatcher) yieldToHolders(ctx context.Context, ld *leadership, budget *time.Duration) error {
	d.mu.Lock()
	awaiting, settled := len(ld.awaiting) > 0, ld.settled
	d.mu.Unlock()
	if !awaiting || *budget <= 0 {
		return nil
	}
	start := time.Now()
	timer := time.NewTimer(*budget)
	defer timer.Stop()
	defer func() { *budget -= time.Since(start) }()
	select {
	case <-settled:
	case <-timer.C:
	case <-ld.ctx.Done():
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// heldBacklog bounds the lists of held jobs waiting for readHolders:
// one comes with each TaskExecutor's registration, and a list dropped
// only leaves its jobs to the scan.
const heldBacklog = 64

// readHolders records and starts, ahead of the scan, the jobs that hold
// slots on a registered TaskExecutor: those the ResourceManager knows
// now, then those of each list on held, until ctx ends. It reads their
// plans by id, many at once. A job the scan (or a submission) recorded
// first is left to it; a read that fails leaves its jobs to the scan.
func (d *Dispatcher) readHolders(ctx context.Context, ld *leadership, reader hastore.PlanReader, starts *recoveredStarts, held <-chan []string) {
	ids := d.jobsHoldingSlots(ld)
	for {
		if err := d.recoverHolders(ctx, ld, reader, starts, ids); err != nil {
			if ctx.Err() == nil {
				d.log.Warn("reading the plans of the jobs holding slots failed; the scan will come to them", "jobs", len(ids), "err", err)
			}
		}
		select {
		case ids = <-held:
		case <-ctx.Done():
			return
		}
		// The lists that came meanwhile (TaskExecutors register at
		// about the same time) go in the same read.
		for more := true; more; {
			select {
			case next := <-held:
				ids = append(ids, next...)
			default:
				more = false
			}
		}
	}
}

// holderChunk is how many plans of jobs holding slots recoverHolders
// reads before it starts their runners. A new leader learns of
// thousands at once (every TaskExecutor registers within a few
// milliseconds of the grant), and reading 9,000 plans took it 1.6 to 2.6
// seconds on two cores while nothing campaigned: in chunks, the first
// JobMasters campaign while the later plans are read (issue 33).
var holderChunk = 1000

// recoverHolders reads the plans of the jobs of ids not recorded yet,
// records them, and starts their runners at once, each awaited as the
// scan's holders are (awaitLocked): holderChunk jobs at a time, so that
// a chunk's runners start while the next chunk is read.
func (d *Dispatcher) recoverHolders(ctx context.Context, ld *leadership, reader hastore.PlanReader, starts *recoveredStarts, ids []string) error {
	started := 0
	defer func() {
		if started > 0 {
			d.log.Info("started the jobs holding slots ahead of the scan", "jobs", started)
		}
	}()
	for len(ids) > 0 {
		n := min(holderChunk, len(ids))
		recorded, err := d.recoverHolderChunk(ctx, ld, reader, starts, ids[:n])
		started += recorded
		if err != nil {
			return err
		}
		ids = ids[n:]
	}
	return nil
}

// recoverHolderChunk is recoverHolders for one chunk of ids; it returns
// how many jobs it recorded and started.
func (d *Dispatcher) recoverHolderChunk(ctx context.Context, ld *leadership, reader hastore.PlanReader, starts *recoveredStarts, ids []string) (int, error) {
	unknown := func() []string {
		d.mu.Lock()
		defer d.mu.Unlock()
		var out []string
		for _, id := range ids {
			if _, known := ld.jobs[id]; !known {
				out = append(out, id)
			}
		}
		return out
	}()
	if len(unknown) == 0 {
		return 0, nil
	}
	plans, err := reader.ReadExecutionPlans(ctx, unknown)
	if err != nil {
		return 0, err
	}
	d.mu.Lock()
	var recorded []string
	for _, p := range plans {
		id := p.Plan.GetJobId()
		if _, known := ld.jobs[id]; known {
			continue
		}
		if err = d.recoverJobLocked(ld, p.Plan, p.Cancellation, starts); err != nil {
			break
		}
		recorded = append(recorded, id)
	}
	early := ld.awaitLocked(starts, recorded)
	d.mu.Unlock()
	for _, start := range early {
		start()
	}
	return len(recorded), err
}

// recoveryPage is the plans a recovery reads at once from a store that
// reads them a page at a time: a store busy with the recovered jobs'
// campaigns answers each read slowly, so that reads are few and large.
var recoveryPage = 10000

// recoverJobLocked records a recovered job from its plan and its cancel
// request (nil if none), and adds what starts its runner to starts; d.mu
// must be held.
func (d *Dispatcher) recoverJobLocked(ld *leadership, plan *hastorev1.ExecutionPlan, cancellation *jobplanev1.Cancellation, starts *recoveredStarts) error {
	d.log.Debug("recovering a job", "job", plan.GetJobId(), "cancel_requested", cancellation != nil)
	j := newJob(plan)
	j.cancellation = recorded(cancellation)
	ld.jobs[j.id] = j
	_ = d.admitLocked(ld, j, plan.GetJobGraph(), false)
	start, err := d.prepareLocked(ld, j, plan, true, cancellation != nil, nil)
	if err != nil {
		return err
	}
	starts.add(j.id, start)
	return nil
}

// recoveredStarts are the runner starts of the recovered jobs, by job id,
// and the ids in the order they were recovered.
type recoveredStarts struct {
	fns   map[string]startFunc
	order []string
	// awaited counts the starts awaitLocked took out.
	awaited int
}

// Hurry launches at once the jobs of ids that wait for a seat in the
// admission window: a TaskExecutor showed slots of theirs, where tasks
// may run and wait for a JobMaster to adopt them (a leader's first
// heartbeats with a TaskExecutor that registered late). Jobs launched
// are left as they are; a job whose runner has not started yet is
// launched first by the recovery (launch asks for the jobs holding
// slots), and one not recorded yet, while a scan recovers the jobs, has
// its plan read ahead of the scan (readHolders).
func (d *Dispatcher) Hurry(ids []string) {
	var hurry []interface{ Hurry() }
	d.mu.Lock()
	if ld := d.lead; ld != nil {
		var unknown []string
		for _, id := range ids {
			j := ld.jobs[id]
			if j == nil {
				unknown = append(unknown, id)
				continue
			}
			if h, ok := j.runner.(interface{ Hurry() }); ok {
				hurry = append(hurry, h)
			}
		}
		if len(unknown) > 0 && ld.held != nil {
			select {
			case ld.held <- unknown: // recovery reads their plans ahead of its scan
			default: // the scan comes to them
			}
		}
	}
	d.mu.Unlock()
	for _, h := range hurry {
		h.Hurry()
	}
}

// jobsHoldingSlots returns the jobs that hold slots on a registered
// TaskExecutor; none once the term is over, or without TaskExecutors.
func (d *Dispatcher) jobsHoldingSlots(ld *leadership) []string {
	if ld == nil || d.cfg.TaskExecutors == nil || ld.ctx.Err() != nil {
		return nil
	}
	return d.cfg.TaskExecutors.JobsHoldingSlots()
}

// awaitLocked takes out of starts the starts of the jobs of ids it holds,
// for the caller to call once d.mu is released, and notes each job as
// awaited: launch waits for it to report before it starts the jobs that
// hold no slots. d.mu must be held.
func (ld *leadership) awaitLocked(starts *recoveredStarts, ids []string) []func() {
	var fns []func()
	for _, id := range ids {
		start, ok := starts.fns[id]
		if !ok {
			continue
		}
		delete(starts.fns, id)
		if ld.awaiting == nil {
			ld.awaiting, ld.settled = map[string]bool{}, make(chan struct{})
		}
		ld.awaiting[id] = true
		fns = append(fns, func() { start(false) })
	}
	starts.awaited += len(fns)
	return fns
}

func (s *recoveredStarts) add(id string, start startFunc) {
	s.fns[id] = start
	s.order = append(s.order, id)
}

// launchChunk is how many recovered runners launch starts between two
// looks at the jobs that hold slots.
const launchChunk = 1000

// launchHold bounds how long launch waits for the runners of the jobs
// holding slots before it starts the others.
const launchHold = 5 * time.Second

// launch calls every start of starts: first those of the jobs that hold
// slots on a registered TaskExecutor, whose tasks may be running and wait
// for a JobMaster to adopt them within their task lease; then, once each
// of those reported its JobMaster's status or ended (launchHold at
// most), the others, in order. A takeover of 10,000 running jobs among
// 100,000 waiting ones keeps a small machine's cores busy for seconds;
// the waiting jobs lose nothing by waiting that long, and the running
// ones are adopted sooner. The jobs holding slots are asked again every
// launchChunk starts, so that the jobs of a TaskExecutor that registers
// meanwhile go next. With ld nil (the term is over), the runners start
// only to suspend at once.
//
// It returns how many started as holding slots.
func (d *Dispatcher) launch(ld *leadership, starts *recoveredStarts) (held int) {
	if starts == nil {
		return 0
	}
	n := 0
	// The jobs holding slots launch at once; the others through the
	// term's admission window.
	run := func(id string, gated bool) bool {
		start, ok := starts.fns[id]
		if ok {
			delete(starts.fns, id)
			start(gated)
			n++
		}
		return ok
	}
	reported := -1 // jobs the first look found holding slots, recovered or not
	holding := func() (ids []string) {
		all := d.jobsHoldingSlots(ld)
		if reported < 0 {
			reported = len(all)
		}
		for _, id := range all {
			if _, ok := starts.fns[id]; ok {
				ids = append(ids, id)
			}
		}
		return ids
	}
	var settled chan struct{}
	if ld != nil {
		first := holding()
		d.mu.Lock()
		fns := ld.awaitLocked(starts, first)
		settled = ld.settled // nil if no job was awaited, here or while recovering
		d.mu.Unlock()
		for _, start := range fns {
			start()
			n++
		}
		held = starts.awaited
	}
	if settled != nil {
		timer := time.NewTimer(launchHold)
		select {
		case <-settled:
		case <-timer.C:
		case <-ld.ctx.Done():
		}
		timer.Stop()
		d.mu.Lock()
		ld.awaiting = nil
		d.mu.Unlock()
	}
	if ld != nil {
		d.log.Info("starting the recovered jobs", "jobs", len(starts.order), "holding_slots", held, "reported_holding", reported)
	}
	for next, i := n+launchChunk, 0; i < len(starts.order); i++ {
		if n >= next {
			for _, id := range holding() {
				run(id, false)
				held++
			}
			next = n + launchChunk
		}
		run(starts.order[i], true)
	}
	return held
}

// recoveryReads bounds the store reads of a recovery in flight at once.
const recoveryReads = 32

// planRead is what recovery reads of one listed job.
type planRead struct {
	done chan struct{} // closed once the fields below are set
	skip bool          // the job is known; nothing was read
	plan *hastorev1.ExecutionPlan
	// cancellation is the job's cancel request; nil if none.
	cancellation *jobplanev1.Cancellation
	err          error
}

// readAhead reads, recoveryReads at a time, the plan and cancel flag of
// each listed job that known does not skip, until ctx ends.
func (d *Dispatcher) readAhead(ctx context.Context, ids []string, known func(string) bool) []*planRead {
	reads := make([]*planRead, len(ids))
	for i := range reads {
		reads[i] = &planRead{done: make(chan struct{})}
	}
	go func() {
		sem := make(chan struct{}, recoveryReads)
		for i, id := range ids {
			r := reads[i]
			if known(id) {
				r.skip = true
				close(r.done)
				continue
			}
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return // the recovery returned; nobody waits for the rest
			}
			go func() {
				defer func() { <-sem; close(r.done) }()
				if r.plan, r.err = d.cfg.Store.GetExecutionPlan(ctx, id); r.err == nil {
					r.cancellation, r.err = d.cfg.Store.Cancellation(ctx, id)
				}
			}()
		}
	}()
	return reads
}

// recorded returns a cancel request's record as a job shows it: nil for
// one without any (an empty record, from a store or a request before 1.2).
func recorded(c *jobplanev1.Cancellation) *jobplanev1.Cancellation {
	if c == nil || proto.Equal(c, &jobplanev1.Cancellation{}) {
		return nil
	}
	return c
}

// persisted is the persisting channel of every job whose plan is
// persisted, and the done channel of every job with a result: closed.
var persisted = closedChan()

func closedChan() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

func newJob(plan *hastorev1.ExecutionPlan) *job {
	j := &job{
		id: plan.GetJobId(), runID: plan.GetRunId(), digest: plan.GetDigest(), name: plan.GetJobGraph().GetName(),
		submitNanos: plan.GetSubmitTime().AsTime().UnixNano(), statusNanos: time.Now().UnixNano(), owner: plan.GetSubmittedBy(),
		persisting: make(chan struct{}),
	}
	if timeout := plan.GetJobGraph().GetConfig().GetClientHeartbeatTimeout().AsDuration(); timeout > 0 {
		j.heartbeatTimeout = timeout
	}
	return j
}

// submitted returns the job's submission time.
func (j *job) submitted() time.Time { return time.Unix(0, j.submitNanos).UTC() }

// hist returns the job's history: j.history, or, while a job made by
// newJob has not changed, one that holds its first summary, built now;
// d.mu must be held.
func (j *job) hist() *history {
	if j.history.changes != nil {
		return &j.history
	}
	h := newHistory(&jobplanev1.JobSummary{
		JobId: j.id, Name: j.name, Status: jobstatus.Initializing,
		SubmitTime: timestamppb.New(j.submitted()), StatusTime: timestamppb.New(time.Unix(0, j.statusNanos)), SubmittedBy: j.owner, RunId: j.runID,
	})
	return &h
}

func summaryOfResult(res *jobplanev1.JobResult) *jobplanev1.JobSummary {
	return &jobplanev1.JobSummary{
		JobId: res.GetJobId(), Name: res.GetName(), Status: res.GetStatus(),
		SubmitTime: res.GetSubmitTime(), StatusTime: res.GetEndTime(), EndTime: res.GetEndTime(),
		RestartCount: res.GetRestartCount(), Failure: res.GetFailure(), SubmittedBy: res.GetSubmittedBy(),
		RunId: res.GetRunId(), Cancellation: res.GetCancellation(),
	}
}

// latest returns the job's current summary; d.mu must be held.
func (j *job) latest() *jobplanev1.JobSummary { return j.hist().latest() }

// status returns the job's current status, building no summary; d.mu must
// be held.
func (j *job) status() jobplanev1.JobStatus {
	if j.history.changes == nil {
		return jobstatus.Initializing
	}
	return j.history.latest().GetStatus()
}

// recordLocked records the job's summary s, after a status change or a
// restart, moves j in the index and wakes watchers; d.mu must be held. A
// summary that neither changes the status nor grows the restart count
// only refreshes the current one.
func (ld *leadership) recordLocked(j *job, s *jobplanev1.JobSummary) {
	if s.SubmitTime == nil {
		s.SubmitTime = timestamppb.New(j.submitted())
	}
	s.SubmittedBy, s.RunId = j.owner, j.runID
	if s.Cancellation == nil {
		s.Cancellation = j.cancellation
	}
	j.history = *j.hist()
	if !j.history.record(s) {
		return
	}
	ld.index.setStatus(j, s.GetStatus())
	if j.changed != nil {
		close(j.changed)
		j.changed = nil
	}
}

// changedLocked returns a channel closed at the job's next recorded
// change; d.mu must be held.
func (j *job) changedLocked() <-chan struct{} {
	if j.changed == nil {
		j.changed = make(chan struct{})
	}
	return j.changed
}

// doneLocked returns a channel closed once the job's result is recorded
// (closed already if it is); d.mu must be held.
func (j *job) doneLocked() <-chan struct{} {
	if j.result != nil {
		return persisted
	}
	if j.done == nil {
		j.done = make(chan struct{})
	}
	return j.done
}

// forgetLocked removes j from the leadership's jobs and index; d.mu must
// be held.
func (ld *leadership) forgetLocked(j *job) {
	if ld.jobs[j.id] == j {
		delete(ld.jobs, j.id)
	}
	ld.releaseLocked(j)
	dropFinalLocked(ld, j)
	ld.index.remove(j)
}

// startLocked starts the job's runner under the leadership, canceled
// from the start if its cancellation was requested; d.mu must be held.
func (d *Dispatcher) startLocked(ld *leadership, j *job, plan *hastorev1.ExecutionPlan, recovered, canceled bool, granted *hastore.Leadership) error {
	start, err := d.prepareLocked(ld, j, plan, recovered, canceled, granted)
	if err != nil {
		return err
	}
	start(true)
	return nil
}

// startFunc starts a prepared job's runner: through the term's admission
// window (gated), or at once.
type startFunc func(gated bool)

// admitter is a JobRunner that can wait in an admission window
// (runner.Runner); others start at once.
type admitter interface {
	Admit(ctx context.Context, g *runner.Gate, now bool, done func(jobmaster.Result, error))
}

// prepareLocked makes the job's runner and records the job as started,
// canceled from the start if its cancellation was requested, and returns
// what runs the runner; d.mu must be held. Until that is called, the job
// is known and answered for as a job whose runner has no JobMaster yet.
// start must be called, once, before Lead returns: ld.wg counts the
// runner from now on.
func (d *Dispatcher) prepareLocked(ld *leadership, j *job, plan *hastorev1.ExecutionPlan, recovered, canceled bool, granted *hastore.Leadership) (start startFunc, err error) {
	if d.lead != ld || ld.ctx.Err() != nil {
		return nil, ErrNotLeading
	}
	r, err := d.cfg.Jobs.NewRunner(plan, recovered, granted, func(s *jobplanev1.JobSummary) {
		// A globally terminal status is published by finish, once the
		// result is durable; until then the job shows as still running.
		if jobstatus.IsGloballyTerminal(s.GetStatus()) {
			return
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		if j.result == nil {
			ld.recordLocked(j, s)
		}
		ld.settleLocked(j.id)
	})
	if err != nil {
		return nil, err
	}
	j.runner = r
	close(j.persisting)
	j.persisting = persisted // the closed channel is dropped: every job would keep one
	ld.index.add(j)
	if j.heartbeatTimeout > 0 {
		j.heartbeat = time.AfterFunc(j.heartbeatTimeout, func() {
			d.log.Info("client heartbeat timed out; canceling the job", "job", j.id, "timeout", j.heartbeatTimeout)
			r.Cancel(context.Background())
		})
	}
	if canceled {
		// Before it runs: the job ends CANCELED without a JobMaster.
		r.Cancel(ld.ctx)
		s := proto.CloneOf(j.latest())
		s.Status, s.StatusTime = jobstatus.Cancelling, timestamppb.Now()
		ld.recordLocked(j, s)
	}
	rctx := ld.ctx
	if sc := j.span(); sc.IsValid() {
		rctx = trace.ContextWithSpanContext(rctx, sc)
	}
	ld.wg.Add(1)
	return func(gated bool) {
		done := func(res jobmaster.Result, err error) { d.runnerDone(ld, j, res, err) }
		// A job granted its leadership with its plan's write launches at
		// once, on a seat past the window if need be.
		if a, ok := r.(admitter); ok && gated {
			a.Admit(rctx, ld.gate, granted != nil, done)
			return
		}
		r.Start(rctx, done)
	}, nil
}

// runnerDone takes the end of a job's runner: its result, or its
// suspension when the leadership ended.
func (d *Dispatcher) runnerDone(ld *leadership, j *job, res jobmaster.Result, err error) {
	defer ld.wg.Done()
	d.mu.Lock()
	ld.settleLocked(j.id)
	d.mu.Unlock()
	if errors.Is(err, runner.ErrJobMasterInit) {
		// As Flink does: a job that cannot be recovered here is left
		// to another leader.
		d.log.Error("a recovered job's JobMaster cannot be created; stepping down", "job", j.id, "err", err)
		d.stepDown(ld)
	} else if err != nil {
		d.log.Warn("runner stopped", "job", j.id, "err", err)
	}
	if j.heartbeat != nil {
		j.heartbeat.Stop()
	}
	if jobstatus.IsGloballyTerminal(res.Status) {
		d.mu.Lock()
		d.keepPlacementsLocked(ld, j, res.Placements)
		d.keepDetailsLocked(ld, j, res.Final)
		d.mu.Unlock()
	}
	if !jobstatus.IsGloballyTerminal(res.Status) {
		d.mu.Lock()
		s := proto.CloneOf(j.latest())
		s.Status, s.StatusTime = jobstatus.Suspended, timestamppb.Now()
		ld.recordLocked(j, s)
		d.mu.Unlock()
		return
	}
	d.finish(ld, j, res)
}

// finish records a globally terminal job: its dirty result (fenced; if
// that cannot be written the Dispatcher gives up its leadership rather
// than lose it), then the cleanup, then the clean mark.
func (d *Dispatcher) finish(ld *leadership, j *job, res jobmaster.Result) {
	now := time.Now()
	result := &jobplanev1.JobResult{
		JobId: j.id, Status: res.Status, SubmitTime: timestamppb.New(j.submitted()), EndTime: timestamppb.New(now),
		Failure: res.Failure, RestartCount: int32(res.Restarts), Name: j.name, PlanDigest: j.digest,
		ExceptionHistory: res.Exceptions, SubmittedBy: j.owner,
		Values: res.Values, Accumulators: res.Accumulators, RunId: j.runID,
	}
	d.mu.Lock()
	if res.Status == jobstatus.Canceled {
		result.Cancellation = j.cancellation
	}
	d.mu.Unlock()
	// Where the attempts ran goes with the result, so that their output
	// is found after a restart or a change of leader (output.go).
	result.Placements = res.Placements.Proto()

	f := ld.l.Fence()
	// The store records the result and cleans up after the job, in one
	// write or in the contract's three steps (Store.FinishJob); whatever
	// of the cleanup it did not finish, cleanup does below.
	var pending *hastore.CleanupPendingError
	cleaned := false
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithTimeout(ld.ctx, 10*time.Second)
		err := d.cfg.Store.FinishJob(ctx, f, result)
		cancel()
		if errors.As(err, &pending) {
			// The result is recorded; a step of its cleanup failed, and
			// cleanup goes on from there.
			break
		}
		if err == nil || errors.Is(err, hastore.ErrResultExists) {
			// A result that existed already (an earlier attempt's, whose
			// answer was lost) may still need its cleanup, and is the one
			// served: what the store holds, not this attempt's.
			cleaned = err == nil
			if err != nil {
				gctx, gcancel := context.WithTimeout(ld.ctx, 10*time.Second)
				if entry, gerr := d.cfg.Store.GetJobResultEntry(gctx, j.id); gerr == nil && entry.GetResult() != nil {
					result = entry.GetResult()
				}
				gcancel()
			}
			break
		}
		if errors.Is(err, hastore.ErrCancelRequested) {
			// A cancel was acknowledged before this result could be
			// written: the store refused it, and the job ends CANCELED, as
			// the cancel's answer promised. The exceptions are kept.
			d.log.Info("the job's cancellation was requested before its result; it ends CANCELED", "job", j.id, "status", result.GetStatus())
			result.Status, result.Failure = jobstatus.Canceled, nil
			if result.Cancellation == nil {
				// The request was recorded, but its CancelJob has not
				// told this job yet: the store's record is the one.
				result.Cancellation = d.storedCancellation(ld, j)
			}
			continue
		}
		if ld.ctx.Err() != nil || errors.Is(err, hastore.ErrStaleToken) {
			return // no longer the leader: the next one recovers the job
		}
		if attempt >= 5 {
			// Rather than lose the result, give up the leadership: the next
			// leader recovers the job from its plan.
			d.log.Error("cannot record a job's result; giving up leadership", "job", j.id, "err", err)
			d.stepDown(ld)
			return
		}
		select {
		case <-ld.ctx.Done():
			return
		case <-time.After(time.Duration(attempt+1) * 100 * time.Millisecond):
		}
	}
	d.mu.Lock()
	j.result = result
	ld.releaseLocked(j)
	ld.recordLocked(j, summaryOfResult(result))
	if j.done != nil {
		close(j.done)
	}
	d.mu.Unlock()
	d.log.Info("job terminated", "job", j.id, "status", result.GetStatus())
	telemetry.JobEnded(ld.ctx, strings.TrimPrefix(result.GetStatus().String(), "JOB_STATUS_"), result.GetEndTime().AsTime().Sub(result.GetSubmitTime().AsTime()))
	if !cleaned {
		d.cleanup(ld.ctx, f, j.id, pending)
	}
}

// storedCancellation returns the job's cancel request's record as the
// store keeps it, and keeps it in j; nil if it cannot be read or has none.
func (d *Dispatcher) storedCancellation(ld *leadership, j *job) *jobplanev1.Cancellation {
	ctx, cancel := context.WithTimeout(ld.ctx, d.cfg.PersistTimeout)
	defer cancel()
	c, err := d.cfg.Store.Cancellation(ctx, j.id)
	if err != nil {
		d.log.Warn("reading a job's cancel request", "job", j.id, "err", err)
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	ld.cancellationLocked(j, recorded(c))
	return j.cancellation
}

// cancellationLocked keeps c as the job's cancel request's record unless
// it has one, and shows it in the job's summary; d.mu must be held.
func (ld *leadership) cancellationLocked(j *job, c *jobplanev1.Cancellation) {
	if j.cancellation != nil || c == nil {
		return
	}
	j.cancellation = c
	if j.result == nil {
		s := proto.CloneOf(j.latest())
		s.Cancellation = c
		ld.recordLocked(j, s)
	}
}

// stepDown gives up the leadership, retrying until the store records it
// or the term ends anyway.
func (d *Dispatcher) stepDown(ld *leadership) {
	for ld.ctx.Err() == nil {
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := ld.l.Resign(rctx)
		cancel()
		if err == nil {
			return
		}
		select {
		case <-ld.ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// cleanup removes a terminated job's plan and marks its result clean,
// retrying with backoff while leading; failures are logged, not fatal.
// pending, if set, is FinishJob's report of the cleanup it began: its
// failed step is where cleanup starts, and its error counts as that
// step's first attempt.
func (d *Dispatcher) cleanup(ctx context.Context, f hastore.Fence, jobID string, pending *hastore.CleanupPendingError) {
	backoff := 100 * time.Millisecond
	step := 0
	if pending != nil && pending.PlanDeleted {
		step = 1
	}
	for step < 2 {
		// Each call is bounded: a store call that hangs is retried, not
		// waited on for as long as the leadership lasts.
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		var err error
		if pending != nil {
			err, pending = pending.Err, nil
		} else if step == 0 {
			err = d.cfg.Store.DeleteExecutionPlan(cctx, f, jobID)
		} else {
			err = d.cfg.Store.MarkJobResultClean(cctx, f, jobID)
		}
		cancel()
		switch {
		case err == nil, step == 1 && errors.Is(err, hastore.ErrResultNotFound):
			step++
			continue
		case ctx.Err() != nil, errors.Is(err, hastore.ErrStaleToken), errors.Is(err, hastore.ErrInvalidArgument):
			return
		}
		d.log.Warn("job cleanup failed; retrying", "job", jobID, "err", err, "backoff", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
			backoff = min(2*backoff, 10*time.Second)
		}
	}
}

// Package runner is the JobManagerRunner: one per job, it campaigns in the
// job's election "job/<id>" and, for each grant, runs a JobMaster whose
// fencing token is that grant's. Leadership changes are handled one at a
// time, in order; while a JobMaster runs the job, the runner keeps no
// goroutine (the JobMaster's end continues it).
package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/types/known/timestamppb"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/sdk/wire/jobstatus"
	"github.com/jobplane/jobplane/sdk/wire/jobtrace"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/internal/jobmaster"
)

// Config configures a Runner.
type Config struct {
	// JobID is the job's id. Required.
	JobID string
	// Session is the process's HA-store session, on which the runner
	// campaigns. Required.
	Session hastore.Session
	// Store is the HA store. Required.
	Store hastore.Store
	// Address is the base URL the JobMaster publishes. Required.
	Address string
	// Plan is the job's execution plan (its job_id is JobID's), passed to
	// NewJobMaster. A runner that waits for a seat in a gate (Admit) lets
	// it go, and reads it back from Store when it launches: a job waiting
	// for slots keeps no graph (issue 33). Required. A Runner's copy is
	// guarded by its mu: nil while let go.
	Plan *hastorev1.ExecutionPlan
	// NewJobMaster creates the JobMaster of one grant, for the job's plan.
	// Its ctx carries the span of the JobMaster's creation, whose trace is
	// the job's submission's when Start's context carried one. Required.
	NewJobMaster func(ctx context.Context, l *hastore.Leadership, plan *hastorev1.ExecutionPlan) (*jobmaster.JobMaster, error)
	// Router routes JobMasterService calls to the current JobMaster.
	// Required.
	Router *jobmaster.Router
	// Recovered says the job was recovered by a new Dispatcher leader
	// rather than just submitted. If its JobMaster cannot be created, a
	// submitted job fails, while a recovered one is left to the next
	// leader: Start passes ErrJobMasterInit, and the Dispatcher steps down.
	//
	// A recovered job had no result when the Dispatcher listed the results
	// after its grant, and none can be written since but by that
	// Dispatcher (results are fenced by its token): the runner's first
	// term looks for none, which saves a store read per job when a new
	// leader takes over many. Later terms look.
	Recovered bool
	// Granted, if set, is the job's leadership, granted by the write that
	// persisted its plan (hastore.Session's PutExecutionPlanAndLead): the
	// runner's first term, with no campaign, and no result to look for
	// (that write found none, and only a leader of the job can bring one
	// about).
	Granted *hastore.Leadership
	// Logger receives the runner's logs. Default: slog.Default().
	Logger *slog.Logger
}

// ErrJobMasterInit reports that a recovered job's JobMaster could not be
// created.
var ErrJobMasterInit = errors.New("runner: JobMaster initialization failed")

// Runner runs one job across leadership changes.
type Runner struct {
	cfg Config

	mu        sync.Mutex
	current   *jobmaster.JobMaster
	canceling bool
	// looked is set once a term looked for the job's result, or needed
	// not (Config.Recovered's first term); guarded by mu.
	looked bool
	// seat is the gate whose seat the runner holds, until its job first
	// deploys or its first term ends; entry is its place in the gate's
	// queue while it waits for one (Admit). Both guarded by mu.
	seat  *Gate
	entry *gateEntry
	// queued is when the runner started waiting for a seat; its first
	// JobMaster's wait for slots counts from then (WaitingSince).
	// Guarded by mu.
	queued time.Time
	// runID is the plan's run_id: a plan read back must be of this run.
	runID string
}

// New returns a Runner for cfg.
func New(cfg Config) (*Runner, error) {
	if cfg.JobID == "" || cfg.Session == nil || cfg.Store == nil || cfg.Address == "" || cfg.NewJobMaster == nil || cfg.Router == nil {
		return nil, errors.New("runner: job id, session, store, address, JobMaster factory and router are required")
	}
	if cfg.Plan.GetJobId() != cfg.JobID {
		return nil, fmt.Errorf("runner: the plan is of job %q, not %q", cfg.Plan.GetJobId(), cfg.JobID)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Runner{cfg: cfg, runID: cfg.Plan.GetRunId()}, nil
}

// logger is the runner's logger, whose lines name the job. It is made for
// each line rather than kept: lines are few, and a logger kept per job
// costs every waiting job a few hundred bytes.
func (r *Runner) logger() *slog.Logger { return r.cfg.Logger.With("job", r.cfg.JobID) }

// Cancel cancels the job: its current JobMaster cancels its tasks, and a
// job without a JobMaster yet is canceled before any task runs. It returns
// the status right after.
func (r *Runner) Cancel(ctx context.Context) jobplanev1.JobStatus {
	r.mu.Lock()
	r.canceling = true
	jm := r.current
	r.mu.Unlock()
	// A job waiting in the gate goes at once: its runner ends it
	// CANCELED before any JobMaster runs.
	r.Hurry()
	if jm == nil {
		return jobstatus.Cancelling
	}
	st, err := jm.Cancel(ctx)
	if err != nil {
		return jobstatus.Cancelling
	}
	return st
}

// JobMaster returns the current JobMaster, or nil. A JobMaster that
// stopped stays current until the runner's done (or the next term) has
// taken its end.
func (r *Runner) JobMaster() *jobmaster.JobMaster {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.current
}

// Start runs the job until it has a result, which it passes to done, or
// until ctx ends, passing SUSPENDED. A JobMaster whose leadership ended is
// stopped and its outcome ignored; the next grant gets a new JobMaster.
// While a JobMaster runs the job, no goroutine of the runner's waits for
// it: the JobMaster's end continues the runner (see JobMaster.Start).
func (r *Runner) Start(ctx context.Context, done func(jobmaster.Result, error)) {
	go r.loop(ctx, r.cfg.Granted, 50*time.Millisecond, done)
}

// Admit starts the runner as Start does, through gate g: at once if now
// is set (on a seat past the window if need be), or once a seat frees.
// Until then the runner waits with no goroutine, no campaign and no
// JobMaster; a canceled job goes at once; and if the gate closes first
// (its term ended), done gets SUSPENDED. The seat is given back once the
// job first deploys, or the runner's first term ends. With g nil, Admit
// is Start.
func (r *Runner) Admit(ctx context.Context, g *Gate, now bool, done func(jobmaster.Result, error)) {
	if g == nil {
		r.Start(ctx, done)
		return
	}
	// One record while the job waits: no closure of its own.
	e := &gateEntry{gate: g, r: r, ctx: ctx, done: done}
	r.mu.Lock()
	switch {
	case r.canceling:
		// It ends at once, CANCELED: no seat.
		r.mu.Unlock()
		e.launch()
		return
	case now:
		g.force()
	default:
		queued, closed := g.wait(e)
		if closed {
			r.mu.Unlock()
			go e.drop()
			return
		}
		if queued {
			// Read back at launch (lead): a waiting job keeps no graph.
			r.entry, r.queued, r.cfg.Plan = e, time.Now(), nil
			r.mu.Unlock()
			return
		}
	}
	r.seat = g
	r.mu.Unlock()
	e.launch()
}

// gateEntry is a runner waiting in a gate (Runner.Admit).
type gateEntry struct {
	gate *Gate
	r    *Runner
	ctx  context.Context
	done func(jobmaster.Result, error)
	gone bool // taken out of the queue, or dropped; guarded by gate.mu
}

// admit seats the runner and launches it.
func (e *gateEntry) admit() {
	e.r.mu.Lock()
	e.r.entry, e.r.seat = nil, e.gate
	e.r.mu.Unlock()
	e.launch()
}

// launch starts the runner's first term; its seat is given back when the
// runner ends, if no earlier.
func (e *gateEntry) launch() {
	go e.r.loop(e.ctx, e.r.cfg.Granted, 50*time.Millisecond, func(res jobmaster.Result, err error) {
		e.r.releaseSeat()
		e.done(res, err)
	})
}

// drop ends the runner without a seat: its gate closed.
func (e *gateEntry) drop() {
	e.r.mu.Lock()
	e.r.entry = nil
	e.r.mu.Unlock()
	e.done(jobmaster.Result{Status: jobstatus.Suspended}, nil)
}

// Hurry launches the runner at once if it waits in a gate (Admit), past
// the window and without a seat: its job is canceled, or holds slots on
// a TaskExecutor, whose tasks may run and wait to be adopted.
func (r *Runner) Hurry() {
	r.mu.Lock()
	e := r.entry
	if e == nil || !e.gate.hurry(e) {
		r.mu.Unlock()
		return
	}
	r.entry, r.queued = nil, time.Time{}
	r.mu.Unlock()
	e.launch()
}

// releaseSeat gives back the runner's seat in its gate, if it holds one.
func (r *Runner) releaseSeat() {
	r.mu.Lock()
	g := r.seat
	r.seat = nil
	r.mu.Unlock()
	if g != nil {
		g.release()
	}
}

// loop campaigns until it is granted the job's leadership, and leads that
// term; the term's end continues the runner (afterTerm), and the next
// term runs on a new loop.
func (r *Runner) loop(ctx context.Context, granted *hastore.Leadership, backoff time.Duration, done func(jobmaster.Result, error)) {
	election := election.Job(r.cfg.JobID)
	for {
		var (
			l   *hastore.Leadership
			err error
		)
		fresh := granted != nil
		if fresh {
			l, granted = granted, nil
		} else {
			// The candidacy carries the address at once: the JobMaster is
			// reachable there as soon as it leads (calls that come before
			// it exists are answered as by a non-leader), and no second
			// write publishes it. Campaigns come by the thousand when a
			// leader takes over; they are deferrable, so that submissions
			// and the running jobs' writes go before them.
			l, err = r.cfg.Session.Campaign(hastore.Deferrable(ctx), election, r.cfg.Address)
		}
		switch {
		case ctx.Err() != nil:
			if l != nil {
				r.resign(ctx, l) // granted as the run was called off
			}
			done(jobmaster.Result{Status: jobstatus.Suspended}, nil)
			return
		case errors.Is(err, hastore.ErrSessionNotFound):
			done(jobmaster.Result{Status: jobstatus.Suspended}, fmt.Errorf("runner: %w", err))
			return
		case err != nil:
			r.logger().Warn("campaign failed; retrying", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
				backoff = min(2*backoff, 2*time.Second)
			}
			continue
		}
		r.lead(ctx, l, fresh, func(res jobmaster.Result, finished bool, initErr error) {
			r.releaseSeat()
			// The term ended: the runner goes on from here. The next term
			// starts on a goroutine of its own, since this one may be the
			// one that called lead, so that terms never nest.
			if next, again := r.afterTerm(ctx, l, res, finished, initErr, backoff, done); again {
				go r.loop(ctx, nil, next, done)
			}
		})
		return
	}
}

// afterTerm ends a term: the leadership is given back if still held, and
// the runner either passes on the job's result to done, or is to go on
// with the next term (again), with backoff as the pause before the
// campaign after the next failed one. A term that ended on an error of
// the runner's own is followed by a pause here.
func (r *Runner) afterTerm(ctx context.Context, l *hastore.Leadership, res jobmaster.Result, finished bool, initErr error, backoff time.Duration, done func(jobmaster.Result, error)) (next time.Duration, again bool) {
	lost := l.Context().Err() != nil || !l.Valid()
	if initErr != nil && r.cfg.Recovered {
		r.resign(ctx, l)
		done(jobmaster.Result{Status: jobstatus.Suspended}, fmt.Errorf("%w: %v", ErrJobMasterInit, initErr))
		return 0, false
	}
	// Whatever ended this term, give the leadership back if it is still
	// held, so the next campaign (here or in another process) can win.
	r.resign(ctx, l)
	switch {
	case finished:
		done(res, nil)
		return 0, false
	case ctx.Err() != nil:
		done(jobmaster.Result{Status: jobstatus.Suspended}, nil)
		return 0, false
	case lost:
		r.logger().Info("job leadership lost; campaigning again", "token", l.Token())
		return 50 * time.Millisecond, true
	}
	// The term ended on an error of ours: pause before the next one.
	select {
	case <-ctx.Done():
	case <-time.After(backoff):
		backoff = min(2*backoff, 2*time.Second)
	}
	return backoff, true
}

// ResignWithin bounds the resignation of a job's leadership that is still
// held once its runner stops: the revocation notice the server advertises
// (jobplane.v1.ServerTimings.revocation_notice).
const ResignWithin = 5 * time.Second

// resign ends a leadership that is still held, within ResignWithin.
func (r *Runner) resign(ctx context.Context, l *hastore.Leadership) {
	select {
	case <-l.Done():
		return
	default:
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ResignWithin)
	defer cancel()
	// A resignation that failed leaves the candidacy in the store, and the
	// next campaign of this session would fail for ever (the session
	// already has one): it is retried until it takes, the leadership ends,
	// or the bound passes.
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, 500*time.Millisecond) {
		err := l.Resign(rctx)
		if err == nil || errors.Is(err, hastore.ErrStaleToken) || errors.Is(err, hastore.ErrSessionNotFound) {
			return
		}
		r.logger().Debug("resigning the job's leadership", "err", err)
		select {
		case <-l.Done():
			return
		case <-rctx.Done():
			r.logger().Warn("resigning the job's leadership failed", "err", err)
			return
		case <-time.After(wait):
		}
	}
}

// lead runs the job under one grant and calls end once the term is over:
// finished reports a result to keep, and initErr a JobMaster that could not
// be created. fresh says the grant came with the plan's write, which found
// no result. end is called on lead's goroutine if no JobMaster runs the
// term, and otherwise on the goroutine that stops the JobMaster (which may
// be lead's, before lead returns).
//
// The term's work ends when either the leadership or ctx ends. No context
// that ends with either is kept for the term: the JobMaster runs under the
// leadership's context, and ctx's end stops it (JobMaster.Stop), which
// saves every waiting job a context with its children map and done
// channel (issue 33).
func (r *Runner) lead(ctx context.Context, l *hastore.Leadership, fresh bool, end func(res jobmaster.Result, finished bool, initErr error)) {
	// A job that already has a result never runs again. A fresh grant
	// needs no look: the write that granted it found none; nor does a
	// recovered job's first term (Config.Recovered).
	r.mu.Lock()
	known := fresh || r.cfg.Recovered && !r.looked
	r.looked = true
	r.mu.Unlock()
	if !known {
		entry, err := r.readResult(ctx, l)
		switch {
		case err == nil:
			res := entry.GetResult()
			end(jobmaster.Result{Status: res.GetStatus(), Failure: res.GetFailure(), Restarts: int(res.GetRestartCount()), Exceptions: res.GetExceptionHistory()}, true, nil)
			return
		case !errors.Is(err, hastore.ErrResultNotFound):
			r.logger().Warn("reading the job's result failed", "err", err)
			end(jobmaster.Result{}, false, nil)
			return
		}
	}
	r.mu.Lock()
	canceled, plan := r.canceling, r.cfg.Plan
	r.mu.Unlock()
	if canceled {
		end(jobmaster.Result{Status: jobstatus.Canceled}, true, nil)
		return
	}
	if plan == nil {
		var err error
		plan, err = r.readPlan(ctx, l)
		switch {
		case errors.Is(err, errOtherRun) || errors.Is(err, hastore.ErrPlanNotFound):
			// The store no longer has this run's plan, which only a leader
			// of the job removes, after its result: as a JobMaster that
			// cannot be created.
			failure := &jobplanev1.FailureInfo{Message: "JobMaster initialization failed: " + err.Error(), Time: timestamppb.Now()}
			end(jobmaster.Result{Status: jobstatus.Failed, Failure: failure, Exceptions: []*jobplanev1.FailureInfo{failure}}, true, err)
			return
		case err != nil:
			r.logger().Warn("reading the job's plan back failed", "err", err)
			end(jobmaster.Result{}, false, nil)
			return
		}
		r.mu.Lock()
		r.cfg.Plan = plan
		r.mu.Unlock()
	}

	// The submission's trace, if Start's context carries one, goes on in
	// the JobMaster.
	cctx, span := jobtrace.Start(context.WithoutCancel(l.Context()), trace.SpanContextFromContext(ctx), "jobplane.jobmaster.create",
		trace.WithAttributes(attribute.String("jobplane.job_id", r.cfg.JobID), attribute.Int64("jobplane.token_epoch", int64(l.Token().Epoch))))
	jm, err := r.cfg.NewJobMaster(cctx, l, plan)
	span.End()
	if err != nil {
		r.logger().ErrorContext(cctx, "creating the JobMaster failed", "token", l.Token(), "err", err)
		failure := &jobplanev1.FailureInfo{Message: "JobMaster initialization failed: " + err.Error(), Time: timestamppb.Now()}
		end(jobmaster.Result{Status: jobstatus.Failed, Failure: failure, Exceptions: []*jobplanev1.FailureInfo{failure}}, true, err)
		return
	}
	r.cfg.Router.Add(r.cfg.JobID, jm)
	r.mu.Lock()
	r.current = jm
	if r.seat != nil {
		jm.OnFirstDeploy(r.releaseSeat)
	}
	if !r.queued.IsZero() {
		jm.WaitingSince(r.queued)
		r.queued = time.Time{}
	}
	if r.canceling {
		go jm.Cancel(l.Context())
	}
	r.mu.Unlock()
	// The end of ctx stops the JobMaster as the leadership's end does.
	// It is arranged before Start, which may end the term before it
	// returns.
	stopOnEnd := context.AfterFunc(ctx, jm.Stop)
	// The JobMaster runs on this goroutine until it has nothing to do,
	// and later on goroutines of its own only while it has: a job costs
	// no goroutine while it waits.
	jm.Start(l.Context(), func(res jobmaster.Result) {
		stopOnEnd()
		r.cfg.Router.Remove(r.cfg.JobID, jm)
		// An outcome reached after the leadership ended is not this
		// JobMaster's to report.
		end(res, res.Status != jobstatus.Suspended && l.Context().Err() == nil && l.Valid(), nil)
		// The stopped JobMaster stays the runner's until its end is
		// taken (the Dispatcher keeps the job's placements then): it
		// still tells where the job's attempts ran, and a reader of the
		// output between the two finds them (JobMaster.Locate). The
		// next term may have a JobMaster already.
		r.mu.Lock()
		if r.current == jm {
			r.current = nil
		}
		r.mu.Unlock()
	})
}

// errOtherRun reports a plan read back that is of another run of the job.
var errOtherRun = errors.New("runner: the stored plan is of another run of the job")

// readPlan reads the job's plan back from the store (Config.Plan); the
// read is cut off when the leadership or ctx ends.
func (r *Runner) readPlan(ctx context.Context, l *hastore.Leadership) (*hastorev1.ExecutionPlan, error) {
	rctx, cancel := context.WithCancel(l.Context())
	defer cancel()
	defer context.AfterFunc(ctx, cancel)()
	plan, err := r.cfg.Store.GetExecutionPlan(rctx, r.cfg.JobID)
	if err == nil && plan.GetRunId() != r.runID {
		return nil, fmt.Errorf("%w: run %q, not %q", errOtherRun, plan.GetRunId(), r.runID)
	}
	return plan, err
}

// readResult reads the job's result entry; the read is cut off when the
// leadership or ctx ends.
func (r *Runner) readResult(ctx context.Context, l *hastore.Leadership) (*hastorev1.JobResultEntry, error) {
	rctx, cancel := context.WithCancel(l.Context())
	defer cancel()
	defer context.AfterFunc(ctx, cancel)()
	return r.cfg.Store.GetJobResultEntry(rctx, r.cfg.JobID)
}

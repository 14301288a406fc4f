package dispatcher

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/types/known/timestamppb"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/jobgraph"
	"github.com/jobplane/jobplane/sdk/planid"
	"github.com/jobplane/jobplane/sdk/wire/jobstatus"
	"github.com/jobplane/jobplane/sdk/wire/jobtrace"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/internal/principal"
	"github.com/jobplane/jobplane/server/internal/telemetry"
)

// SubmitOutcome is the outcome of a submission.
type SubmitOutcome struct {
	Created bool
	Status  jobplanev1.JobStatus
	// RunID is the id of the run the outcome is about: the new run's, or
	// the existing job's.
	RunID string
}

// Errors of submissions, mapped to wire codes by the handler.
var (
	// ErrPersistFailed: the plan could not be persisted; nothing runs.
	ErrPersistFailed = errors.New("dispatcher: persisting the plan failed")
)

// ExistsError says a job id is taken by a different plan, or by another
// principal's job.
type ExistsError struct {
	JobID              string
	GloballyTerminated bool
	// OtherOwner: the job was submitted by another principal (whatever
	// its plan); GloballyTerminated is then not told.
	OtherOwner bool
}

func (e *ExistsError) Error() string {
	if e.OtherOwner {
		return fmt.Sprintf("dispatcher: job id %s is taken by another principal's job", e.JobID)
	}
	return fmt.Sprintf("dispatcher: job %s exists with a different plan", e.JobID)
}

// Submit accepts a job: validated (a *jobgraph.Error if invalid),
// idempotent on its id, persisted before anything else happens for it.
// A new job naming an invokable that no registered TaskExecutor offers,
// while one is registered, is a *NotOfferedError (invokables.go).
// The principal in ctx, if any, owns the job: a submission of its id by
// another principal is an *ExistsError with OtherOwner, whatever its plan,
// so that no one sees or adopts another's job through a resubmission.
func (d *Dispatcher) Submit(ctx context.Context, jobID string, graph *jobplanev1.JobGraph) (SubmitOutcome, error) {
	return d.SubmitReusing(ctx, jobID, graph, false)
}

// SubmitReusing is Submit, and with allowDuplicate, a submission of an id
// whose job is globally terminal removes its kept result (as Purge does)
// and starts a new run of graph, with a new run id; while the job's
// cleanup is not done, it is a *CleanupPendingError and nothing is done.
// A crash after the removal and before the new plan is persisted, or a
// refusal of the new run then (a cluster limit, a failed persist), leaves
// the id free, so that the retried submission creates the run.
func (d *Dispatcher) SubmitReusing(ctx context.Context, jobID string, graph *jobplanev1.JobGraph, allowDuplicate bool) (SubmitOutcome, error) {
	start := time.Now()
	_, span := jobtrace.Start(ctx, trace.SpanContext{}, "jobplane.validate", trace.WithAttributes(attribute.String("jobplane.job_id", jobID)))
	prepared, err := jobgraph.Prepare(graph, d.cfg.ParallelismOverrides, d.cfg.Limits)
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		span.End()
		return SubmitOutcome{}, err
	}
	span.End()
	digest := planid.Digest(graph)
	owner, _ := principal.FromContext(ctx)
	if err := d.checkRestore(ctx, jobID, prepared.GetConfig().GetRestoreFromSavepoint()); err != nil {
		return SubmitOutcome{}, err
	}
	// Checked before d.mu is taken (the ResourceManager has a lock of its
	// own), and told only if the job turns out to be new: a resubmission
	// is answered as always.
	notOffered := d.checkInvokables(jobID, graph)
	absent := false // the store was read while recovering, and had no plan for the id
	for {
		ld, err := d.accepting(ctx)
		if err != nil {
			return SubmitOutcome{}, err
		}
		d.mu.Lock()
		if d.lead != ld {
			d.mu.Unlock()
			continue
		}
		if j := ld.jobs[jobID]; j != nil {
			select {
			case <-j.persisting:
			default:
				// An identical submission is being persisted: wait for its
				// outcome, then look again.
				wait := j.persisting
				d.mu.Unlock()
				select {
				case <-wait:
				case <-ctx.Done():
					return SubmitOutcome{}, ctx.Err()
				}
				continue
			}
			if wait := j.purging; wait != nil {
				// The job's result is being removed: the id is free once
				// that is done, or the result stays.
				d.mu.Unlock()
				select {
				case <-wait:
				case <-ctx.Done():
					return SubmitOutcome{}, ctx.Err()
				}
				continue
			}
			if allowDuplicate && j.result != nil && j.owner == owner.Name {
				if notOffered != nil {
					// The new run would be refused: the old result stays.
					d.mu.Unlock()
					return SubmitOutcome{}, notOffered
				}
				j.purging = make(chan struct{})
				d.mu.Unlock()
				if err := d.removeResult(ld, j); err != nil {
					return SubmitOutcome{}, err
				}
				continue // the id is free: a new run, unless a concurrent submission made one first
			}
			defer d.mu.Unlock()
			if j.owner != owner.Name {
				return SubmitOutcome{}, &ExistsError{JobID: jobID, OtherOwner: true}
			}
			if string(j.digest) != string(digest) {
				return SubmitOutcome{}, &ExistsError{JobID: jobID, GloballyTerminated: j.result != nil}
			}
			return SubmitOutcome{Created: false, Status: j.status(), RunID: j.runID}, nil
		}
		if ld.recovering != nil && !absent {
			// The id may be a persisted job that recovery has not read
			// yet: read it, and answer for it if it is one.
			d.mu.Unlock()
			if absent, err = d.lookUp(ctx, ld, jobID); err != nil {
				if ctx.Err() != nil {
					return SubmitOutcome{}, ctx.Err()
				}
				// The store could not tell: look again once recovery has
				// read every plan (or failed, ending the term).
				d.log.Debug("looking up a submitted job during recovery", "job", jobID, "err", err)
				select {
				case <-ld.ready:
				case <-ld.ctx.Done():
				case <-ctx.Done():
					return SubmitOutcome{}, ctx.Err()
				}
			}
			continue
		}
		if notOffered != nil {
			d.mu.Unlock()
			return SubmitOutcome{}, notOffered
		}
		plan := &hastorev1.ExecutionPlan{JobId: jobID, JobGraph: prepared, Digest: digest, SubmitTime: timestamppb.Now(), SubmittedBy: owner.Name, RunId: newRunID()}
		j := newJob(plan)
		if err := d.admitLocked(ld, j, prepared, true); err != nil {
			d.mu.Unlock()
			return SubmitOutcome{}, err
		}
		// The job's later spans (its runner's, its JobMasters') are the
		// submission's children.
		if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
			j.trace = &sc
		}
		ld.jobs[jobID] = j
		d.mu.Unlock()
		out, err := d.persistAndStart(ld, j, plan)
		if err == nil && out.Created {
			telemetry.JobSubmitted(ctx, time.Since(start))
		}
		return out, err
	}
}

// accepting returns the leadership once it takes submissions: once its
// recovery has recorded every result, so that each id's job is known or
// can be looked up in the store (lookUp). With a cluster limit, once its
// recovery is done: the limit counts every recovered job.
func (d *Dispatcher) accepting(ctx context.Context) (*leadership, error) {
	if d.cfg.MaxJobs > 0 || d.cfg.MaxClusterSubtasks > 0 {
		return d.current(ctx)
	}
	return d.currentAfter(ctx, func(ld *leadership) chan struct{} { return ld.accepting })
}

// lookUp reads the plan and cancel request of job id while recovery is
// reading the plans, and records the job as recovered if it has a plan,
// so that a submission of a persisted job is answered as one (never
// created again) before recovery reaches it; absent says the store has
// no plan for id. A submission creates the job only then: no other
// process writes plans under this leadership.
func (d *Dispatcher) lookUp(ctx context.Context, ld *leadership, id string) (absent bool, err error) {
	plan, err := d.cfg.Store.GetExecutionPlan(ctx, id)
	switch {
	case errors.Is(err, hastore.ErrPlanNotFound):
		return true, nil
	case err != nil:
		return false, err
	}
	c, err := d.cfg.Store.Cancellation(ctx, id)
	if err != nil {
		return false, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if ld.recovering == nil || ld.jobs[id] != nil {
		return false, nil // recorded meanwhile, or recovery read every plan (and so this one)
	}
	if err := d.recoverJobLocked(ld, plan, c, ld.recovering); err != nil {
		if j := ld.jobs[id]; j != nil {
			ld.forgetLocked(j)
			close(j.persisting)
		}
		return false, err
	}
	return false, nil
}

// persistAndStart persists the plan and only then starts the job. A failed
// persist removes the job again, so the same id may be submitted anew.
func (d *Dispatcher) persistAndStart(ld *leadership, j *job, plan *hastorev1.ExecutionPlan) (SubmitOutcome, error) {
	// The outcome must be known whatever the client's deadline: persist
	// under the leadership, bounded by its own timeout.
	ctx, cancel := context.WithTimeout(ld.ctx, d.cfg.PersistTimeout)
	defer cancel()
	f := ld.l.Fence()
	ctx, span := jobtrace.Start(ctx, j.span(), "jobplane.persist", trace.WithAttributes(attribute.String("jobplane.job_id", j.id)))
	// The job's leadership comes with the write only if the job may
	// launch at once; past the admission window it waits without one.
	granted, err := d.cfg.Jobs.PersistPlan(ctx, f, plan, ld.gate.Free())
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
	if err != nil && !errors.Is(err, hastore.ErrStaleToken) && !errors.Is(err, hastore.ErrInvalidArgument) && !errors.Is(err, hastore.ErrResultExists) {
		// The put may have been applied although it failed here, or an
		// earlier attempt's may have been (ErrPlanExists): settle what the
		// store holds before answering.
		var stored *hastorev1.ExecutionPlan
		if stored, err = d.settlePut(ld, plan, err); err == nil && stored != plan {
			// An earlier attempt's plan, whose outcome was never told:
			// the job runs from it, as a later leader would.
			d.mu.Lock()
			j.submitNanos, j.runID = stored.GetSubmitTime().AsTime().UnixNano(), stored.GetRunId()
			if j.history.changes != nil {
				j.history.changes[0].summary.SubmitTime = stored.GetSubmitTime()
				j.history.changes[0].summary.RunId = stored.GetRunId()
			}
			d.mu.Unlock()
			plan = stored
		}
	}
	if err != nil {
		d.mu.Lock()
		ld.forgetLocked(j)
		close(j.persisting)
		d.mu.Unlock()
		switch {
		case !errors.Is(err, hastore.ErrStaleToken) && d.stillLeading(ld) != nil:
			// The leadership ended during the put (which its end cut
			// off): the client goes to the new leader, where the same
			// submission is safe whether or not this put was applied.
			return SubmitOutcome{}, ErrNotLeading
		case errors.Is(err, hastore.ErrStaleToken):
			// The store no longer takes this leadership's writes: give it
			// up, so that the process campaigns again under a new token
			// rather than writing on with this one.
			d.log.WarnContext(ctx, "the HA store refused a plan as stale; stepping down", "job", j.id)
			go d.stepDown(ld)
			return SubmitOutcome{}, ErrNotLeading
		case errors.Is(err, hastore.ErrInvalidArgument):
			return SubmitOutcome{}, &jobgraph.Error{Violations: []jobgraph.Violation{{Field: "job_graph", Description: err.Error()}}}
		case errors.Is(err, ErrOutcomeUnknown):
			go d.settleLater(ld, plan)
			return SubmitOutcome{}, err
		case errors.As(err, new(*ExistsError)):
			return SubmitOutcome{}, err
		}
		d.log.WarnContext(ctx, "persisting a plan failed", "job", j.id, "err", err)
		// A write whose answer was lost may still be applied after the
		// store showed no plan: look again for a while.
		go d.settleLater(ld, plan)
		return SubmitOutcome{}, fmt.Errorf("%w: %v", ErrPersistFailed, err)
	}
	_, span = jobtrace.Start(ld.ctx, j.span(), "jobplane.runner.start", trace.WithAttributes(attribute.String("jobplane.job_id", j.id)))
	d.mu.Lock()
	err = d.startLocked(ld, j, plan, false, false, granted)
	span.End()
	if err != nil {
		ld.forgetLocked(j)
		close(j.persisting)
	}
	d.mu.Unlock()
	if err != nil {
		// Nothing runs here, as the leadership ended: give up the job's
		// leadership. The plan stays (the store removes none without a
		// result): the next leader recovers the job from it, and the
		// client, retrying there, finds it.
		if granted != nil {
			rctx, rcancel := context.WithTimeout(context.WithoutCancel(ld.ctx), d.cfg.PersistTimeout)
			if rerr := granted.Resign(rctx); rerr != nil {
				d.log.Warn("resigning the leadership of a job that could not start", "job", j.id, "err", rerr)
			}
			rcancel()
		}
		return SubmitOutcome{}, err
	}
	// Logged under the submission's span: the line carries its trace.
	d.log.InfoContext(trace.ContextWithSpanContext(ctx, j.span()), "job submitted", "job", j.id, "name", j.name)
	return SubmitOutcome{Created: true, Status: jobstatus.Initializing, RunID: plan.GetRunId()}, nil
}

// maxPlanRecheck is the contract's bound on ServerTimings.plan_recheck.
const maxPlanRecheck = 60 * time.Second

// planRecheck is how long settleLater keeps looking for the plan of a
// failed put (ServerTimings.plan_recheck): a write still in the store's
// pipeline lands within the store's own request timeout of being sent,
// which twice the persist timeout covers, within the contract's bound.
func (d *Dispatcher) planRecheck() time.Duration {
	return min(2*d.cfg.PersistTimeout, maxPlanRecheck)
}

// newRunID returns a new run id: 128 random bits, so that no two runs of
// a job id share one.
func newRunID() string {
	return strings.ToLower(rand.Text())
}

// ErrOutcomeUnknown: a plan put failed in a way that leaves unknown
// whether the plan is stored, and it could not be read back. The client
// retries the same submission, which is safe.
var ErrOutcomeUnknown = errors.New("dispatcher: the outcome of persisting the plan is unknown")

// settleLater finds out, while leading, whether the plan of a failed put
// was stored after all (the write applied late, or its outcome was
// unknown), and if so runs the job, as the next leader would: the client
// was told to retry, and may not. It gives up once the plan has stayed
// absent past the time a late write could land, or the job was submitted
// again meanwhile.
func (d *Dispatcher) settleLater(ld *leadership, plan *hastorev1.ExecutionPlan) {
	until := time.Now().Add(d.planRecheck())
	for backoff := 100 * time.Millisecond; ; backoff = min(2*backoff, 5*time.Second) {
		select {
		case <-ld.ctx.Done():
			return
		case <-time.After(backoff):
		}
		ctx, cancel := context.WithTimeout(ld.ctx, d.cfg.PersistTimeout)
		stored, err := d.cfg.Store.GetExecutionPlan(ctx, plan.GetJobId())
		cancel()
		switch {
		case errors.Is(err, hastore.ErrPlanNotFound) && time.Now().After(until):
			return
		case err != nil:
			continue
		case !samePlan(stored, plan):
			return // another submission's
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.lead != ld || ld.jobs[plan.GetJobId()] != nil {
			return // submitted again meanwhile, or no longer leading
		}
		d.log.Info("a plan whose put had an unknown outcome is stored; running the job", "job", plan.GetJobId())
		j := newJob(stored)
		ld.jobs[j.id] = j
		_ = d.admitLocked(ld, j, stored.GetJobGraph(), false)
		if err := d.startLocked(ld, j, stored, true, false, nil); err != nil {
			ld.forgetLocked(j)
		}
		return
	}
}

// settlePut finds out what a failed put left in the store: the plan it
// stores for the job if that is this submission's (the put, or an earlier
// attempt of the same submission, was applied); an *ExistsError if it is
// another submission's; putErr if there is none; and ErrOutcomeUnknown if
// it cannot be read.
func (d *Dispatcher) settlePut(ld *leadership, plan *hastorev1.ExecutionPlan, putErr error) (*hastorev1.ExecutionPlan, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ld.ctx), d.cfg.PersistTimeout)
	defer cancel()
	stored, err := d.cfg.Store.GetExecutionPlan(ctx, plan.GetJobId())
	switch {
	case err == nil && samePlan(stored, plan):
		d.log.Info("a plan put reported an error but the plan is stored", "job", plan.GetJobId(), "err", putErr)
		return stored, nil
	case err == nil:
		return nil, &ExistsError{JobID: plan.GetJobId(), OtherOwner: stored.GetSubmittedBy() != plan.GetSubmittedBy()}
	case errors.Is(err, hastore.ErrPlanNotFound):
		return nil, putErr
	}
	d.log.Warn("a plan put failed and the plan cannot be read", "job", plan.GetJobId(), "put_err", putErr, "read_err", err)
	return nil, fmt.Errorf("%w: %v", ErrOutcomeUnknown, putErr)
}

// samePlan tells whether a stored plan is the one of a submission: the
// same digest, submitted by the same principal.
func samePlan(stored, plan *hastorev1.ExecutionPlan) bool {
	return string(stored.GetDigest()) == string(plan.GetDigest()) && stored.GetSubmittedBy() == plan.GetSubmittedBy()
}

package hastore

import (
	"context"
	"errors"
	"fmt"
	"time"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
)

// Fence names the leadership on whose behalf a write is made. A store
// performs a fenced write only if Token is Election's current grant,
// checked atomically with the write. Plans and results are covered only by
// the election.JobManager election's tokens: a plan or result write fenced
// by a job's election is invalid, whether or not its token leads.
type Fence struct {
	// Election is the election's name, such as "jobmanager" or "job/<id>".
	Election string
	// Token is the writer's grant in Election.
	Token election.Token
}

// SessionConfig configures a session.
type SessionConfig struct {
	// TTL is how long the session survives without renewal. Stores round it
	// up to whole seconds and raise it to their minimum (one second).
	// Required.
	TTL time.Duration
	// ManualKeepAlive makes the session live only as long as its owner
	// calls Session.KeepAlive: it ends TTL after the last renewal. The
	// HAStoreService handler uses it for remote clients, which renew over
	// the network. Default false: the store renews the session itself until
	// it is closed or the store becomes unreachable for longer than TTL.
	ManualKeepAlive bool
}

// Store is the HA store: leader election with fencing tokens, and the
// durable state a cluster must not lose (execution plans and job results).
//
// Every write takes a Fence and fails with ErrStaleToken, changing nothing,
// unless the fence's token is its election's current grant. Malformed
// input fails with a *ValidationError (errors.Is ErrInvalidArgument) and
// writes nothing. A store that cannot reach its storage fails with
// ErrUnavailable.
//
// Reads are linearizable: a read reflects every write acknowledged before
// it began, through whichever Store value of the backend it is made, and
// one call of a listing returns one snapshot of the store (HAStoreService,
// "Consistency"). Two messages are the same, for the writes that repeat a
// create, when Same holds: their canonical encodings are byte-equal.
//
// Implementations are safe for concurrent use.
type Store interface {
	// OpenSession opens a session, on which campaigns run. Leaderships end
	// when their session ends.
	OpenSession(ctx context.Context, cfg SessionConfig) (Session, error)

	// Resign ends the leadership named by f. A token that no longer leads
	// is no error: nothing changes.
	Resign(ctx context.Context, f Fence) error
	// ConfirmLeadership publishes address as the leader's, for Leader and
	// ObserveLeader. It fails with ErrStaleToken if f does not lead.
	ConfirmLeadership(ctx context.Context, f Fence, address string) error
	// Leader returns the election's current leader; its Token is zero when
	// there is none.
	Leader(ctx context.Context, election string) (election.Leader, error)
	// ObserveLeader calls fn with the election's current leader and then
	// with every change (a new grant, a published address, the leader
	// gone), in order, one call at a time. It returns when ctx is done
	// (with ctx's error) or fn returns an error (with that error).
	ObserveLeader(ctx context.Context, election string, fn func(election.Leader) error) error

	// PutExecutionPlan stores plan if its job has none. A plan is never
	// replaced: if the job's stored plan is the same as plan (Same: equal
	// canonical encodings), the call succeeds and changes nothing; if not,
	// it fails with ErrPlanExists. Plans larger than the store's limit are refused as
	// invalid, and the plan of a job that has a result entry with
	// ErrResultExists.
	PutExecutionPlan(ctx context.Context, f Fence, plan *hastorev1.ExecutionPlan) error
	// PutExecutionPlanCreated is PutExecutionPlan, and also reports
	// whether this call stored the plan: true exactly when it did, false
	// when the job already had an equal plan (a repeated put). The store
	// decides it with the write, so of any number of concurrent or
	// repeated puts of a plan exactly one reports true. A remote store
	// before contract 1.2 reports false.
	PutExecutionPlanCreated(ctx context.Context, f Fence, plan *hastorev1.ExecutionPlan) (created bool, err error)
	// GetExecutionPlan returns the job's plan, or ErrPlanNotFound.
	GetExecutionPlan(ctx context.Context, jobID string) (*hastorev1.ExecutionPlan, error)
	// ListExecutionPlans returns up to limit ids of jobs with a plan, in id
	// order, starting after the id `after` ("" for the first page). A
	// limit of 0 means all.
	ListExecutionPlans(ctx context.Context, after string, limit int) ([]string, error)
	// DeleteExecutionPlan removes the job's plan and its cancel request
	// (and, in a store that keeps checkpoints, its checkpoints and last
	// checkpoint id), once the job has a result entry: without one it fails with
	// ErrResultNotFound, checked with the delete. An absent plan is no
	// error.
	DeleteExecutionPlan(ctx context.Context, f Fence, jobID string) error

	// RequestCancel records, fenced by f, that the job's cancellation was
	// requested, so that a leader that recovers the job cancels it before
	// running anything. It fails with a *JobTerminalError (errors.Is
	// ErrJobTerminal) carrying the result's status, writing nothing, if the
	// job has a result entry (whether or not its plan is deleted yet), and
	// otherwise with ErrPlanNotFound, writing nothing, if the job has no
	// plan: both are checked with the write, so a cancel request and a job
	// result are ordered by the store. Requesting again is no error. The
	// record goes with the plan (DeleteExecutionPlan).
	//
	// c, which may be nil, is kept with the request: the first recorded
	// request's, which a later request never replaces (a later c is
	// dropped). Its fields are bounded as ValidateCancellation says.
	RequestCancel(ctx context.Context, f Fence, jobID string, c *jobplanev1.Cancellation) error
	// CancelRequested reports whether the job's cancellation was requested
	// and its plan is not deleted yet.
	CancelRequested(ctx context.Context, jobID string) (bool, error)
	// Cancellation returns the job's recorded cancel request: nil when
	// its cancellation was not requested (or its plan is deleted), an
	// empty Cancellation when it was requested without one, and otherwise
	// the first request's.
	Cancellation(ctx context.Context, jobID string) (*jobplanev1.Cancellation, error)

	// CreateDirtyJobResult records result as dirty. If the job's entry
	// holds the same result (Same), dirty or clean, it succeeds and
	// changes nothing; if it holds another, it fails with ErrResultExists.
	// A FINISHED or FAILED result of a job without an entry fails with
	// ErrCancelRequested, writing nothing, if the job's cancellation was
	// requested (checked with the write): an acknowledged cancel ends the
	// job CANCELED, so the caller records a CANCELED result instead.
	CreateDirtyJobResult(ctx context.Context, f Fence, result *jobplanev1.JobResult) error
	// MarkJobResultClean marks the job's result clean; a clean one stays
	// clean. It fails with ErrResultNotFound if the job has no entry, and
	// with ErrPlanNotDeleted, writing nothing, while the job's plan exists
	// (checked with the write).
	MarkJobResultClean(ctx context.Context, f Fence, jobID string) error
	// GetJobResultEntry returns the job's result entry, or
	// ErrResultNotFound.
	GetJobResultEntry(ctx context.Context, jobID string) (*hastorev1.JobResultEntry, error)
	// ListJobResultEntries returns up to limit entries in job id order,
	// starting after the id `after`, only those in state unless state is
	// UNSPECIFIED. A limit of 0 means all.
	ListJobResultEntries(ctx context.Context, state hastorev1.JobResultState, after string, limit int) ([]*hastorev1.JobResultEntry, error)
	// DeleteJobResultEntry removes a clean entry; an absent one is no
	// error. It fails with ErrResultDirty for a dirty entry, and with
	// ErrPlanNotDeleted, deleting nothing, while the job's plan exists
	// (checked with the delete).
	DeleteJobResultEntry(ctx context.Context, f Fence, jobID string) error

	// FinishJob records a globally terminal job's result and cleans up
	// after the job: what CreateDirtyJobResult, DeleteExecutionPlan and
	// MarkJobResultClean do in turn, each fenced by f.
	//
	// A backend does it either as one write (the etcd backend: the result
	// is stored clean and the plan and cancel request removed, both or
	// neither, so no state in between is ever seen), or in those three
	// steps, in that order, stopping at the first error
	// (FinishJobInSteps: the remote backend, whose service has no such
	// write). What the caller may rely on, either way:
	//   - nil: the job's entry holds result (or an equal one), clean, and
	//     the job has neither plan nor cancel request;
	//   - a *CleanupPendingError (only in steps): the result is recorded,
	//     dirty, and a cleanup step failed with the error it wraps; the
	//     caller finishes the cleanup from that step, as it would after
	//     CreateDirtyJobResult;
	//   - ErrResultExists: the job already had an entry, which this call
	//     did not complete (another result; or, in one write, an equal
	//     one still dirty); the caller reads the entry and finishes its
	//     cleanup (DeleteExecutionPlan, then MarkJobResultClean), which
	//     is harmless if it was done;
	//   - any other error is CreateDirtyJobResult's (ErrCancelRequested
	//     and ErrStaleToken among them) and leaves what it would leave:
	//     nothing, or, from an unavailable store, perhaps the write.
	// Calling FinishJob again with the same result is safe: what an
	// earlier call wrote counts as done.
	FinishJob(ctx context.Context, f Fence, result *jobplanev1.JobResult) error

	// Close releases the store's resources; it does not close sessions
	// opened from it, whose leases then expire by their TTL.
	Close() error
}

// Session is a store session (on etcd, a lease). Its candidacies and
// leaderships end when it ends.
type Session interface {
	// ID identifies the session; it is the SessionID of its tokens.
	ID() string
	// TTL is the session's granted time to live.
	TTL() time.Duration
	// ValidUntil is the instant until which the session certainly holds at
	// the store, on this process's monotonic clock: the send time of its
	// last acknowledged renewal plus the TTL, less a tenth of the TTL for
	// clock drift. A renewal's acknowledgement proves the lease was renewed
	// no earlier than the request left, so this never overstates. The
	// session ends (Done) once this instant passes without a newer
	// renewal. Zero once the session has ended.
	ValidUntil() time.Time
	// Done is closed when the session has ended: closed, expired, or lost.
	Done() <-chan struct{}
	// Campaign enters a candidacy in election and blocks until it is
	// granted, returning the leadership, or until ctx is done, withdrawing
	// the candidacy. A non-empty address is published with the grant. It
	// fails with ErrCandidacyExists if the session already has a candidacy
	// or leadership in election, and with ErrSessionNotFound if the session
	// ended.
	Campaign(ctx context.Context, election, address string) (*Leadership, error)
	// PutExecutionPlanAndLead is Store.PutExecutionPlan of plan, fenced by
	// f, by the store this session was opened from, and may enter this
	// session's candidacy, carrying address, in the election of plan's job
	// (election.Job) in the same write.
	//
	// A backend that can write both at once (the etcd backend) does: both
	// or neither, and the candidacy is entered only if the election has no
	// candidate at all; it then leads at once, and granted is that
	// leadership, which began with the plan written and no job result
	// present. Submission then costs the store one write before the
	// acknowledgement and none after it before the job runs. A backend
	// that cannot (the remote one) only puts the plan
	// (PutExecutionPlanNoLead).
	//
	// What the caller may rely on: on success, the plan is stored; if
	// granted is nil, no candidacy was entered for the caller, which
	// campaigns as usual (Campaign); if it is not, the session leads the
	// job's election with it. The errors are PutExecutionPlan's, and
	// ErrCandidacyExists if the session already has a candidacy in the
	// election (a backend that enters none may not check it); on an error
	// the session holds no leadership from the call.
	PutExecutionPlanAndLead(ctx context.Context, f Fence, plan *hastorev1.ExecutionPlan, address string) (granted *Leadership, err error)
	// KeepAlive renews a session opened with ManualKeepAlive for another
	// TTL and returns the TTL. It fails with ErrSessionNotFound if the
	// session ended. On other sessions it only reports the TTL.
	KeepAlive(ctx context.Context) (time.Duration, error)
	// Close ends the session at once, ending its leaderships. Closing an
	// ended session is no error.
	Close(ctx context.Context) error
}

// Every Store follows leaders as election.Observer asks, so that programs
// needing only that (a TaskExecutor) can take a narrower interface.
var _ election.Observer = Store(nil)

// Errors of the ordering of cancel requests and job results (RequestCancel,
// CreateDirtyJobResult, FinishJob). Match them with errors.Is.
var (
	// ErrJobTerminal: the job has a result entry, so its cancellation can
	// no longer be requested. The error is a *JobTerminalError naming the
	// result's status.
	ErrJobTerminal = errors.New("hastore: the job has a result")
	// ErrCancelRequested: the job's cancellation was requested, so it may
	// not end FINISHED or FAILED; it ends CANCELED.
	ErrCancelRequested = errors.New("hastore: the job's cancellation was requested")
)

// JobTerminalError is RequestCancel's refusal for a job that has a result
// entry. errors.Is(err, ErrJobTerminal) is true for it.
type JobTerminalError struct {
	// JobID is the job's id.
	JobID string
	// Status is the status of the job's stored result; UNSPECIFIED when a
	// remote store did not say.
	Status jobplanev1.JobStatus
}

func (e *JobTerminalError) Error() string {
	return fmt.Sprintf("hastore: job %s has a result (%v)", e.JobID, e.Status)
}

// Is makes errors.Is(err, ErrJobTerminal) true for a JobTerminalError.
func (e *JobTerminalError) Is(target error) bool { return target == ErrJobTerminal }

// CancelOverrides reports whether a cancel request, once recorded, keeps a
// job from ending in status: it ends CANCELED instead. A backend refuses
// such a result with ErrCancelRequested (see CreateDirtyJobResult).
func CancelOverrides(status jobplanev1.JobStatus) bool {
	return status == jobplanev1.JobStatus_JOB_STATUS_FINISHED || status == jobplanev1.JobStatus_JOB_STATUS_FAILED
}

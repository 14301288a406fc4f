package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	"github.com/jobplane/jobplane/gen/jobplane/cluster/v1/clusterv1connect"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
	"github.com/jobplane/jobplane/server/internal/jobmaster"
)

// Task output. The Dispatcher finds where the attempt was deployed (the
// running job's JobMaster knows; for an ended job, the placements its
// JobMaster left are kept for OutputRetention, and after that, or under
// a later leader, those kept with the job's result), finds that
// TaskExecutor's address in the ResourceManager's registry (or, for a
// TaskExecutor no longer registered, the address the placement
// recorded), and reads the output there with
// TaskExecutorService.GetTaskOutput.

// Defaults of the placements kept for ended jobs (see Config).
const (
	// DefaultOutputRetention is how long an ended job's placements are
	// kept in memory (where a vertex or subtask is still checked against
	// the job's graph); after it, those kept with the job's result serve.
	DefaultOutputRetention = 10 * time.Minute
	// DefaultOutputSubtasks bounds the subtasks of the ended jobs whose
	// placements are kept.
	DefaultOutputSubtasks = 1_000_000
)

// outputCallTimeout bounds a call to a TaskExecutor for output.
const outputCallTimeout = 10 * time.Second

// OutputQuery names the output to read: an attempt of a subtask, and
// where in its output to start.
type OutputQuery struct {
	JobID, VertexID string
	SubtaskIndex    int
	// Attempt is the attempt's number; negative for the latest deployed.
	Attempt int
	// Offset and MaxBytes are as in GetTaskOutputRequest.
	Offset   int64
	MaxBytes int32
}

// OutputNotFoundError says that no output of the attempt can be read:
// it was not deployed (yet), where it was is no longer known, or its
// TaskExecutor keeps no output of it (forgotten, or the TaskExecutor is
// gone).
type OutputNotFoundError struct {
	Query OutputQuery
	// Attempt is the attempt's number, when known (else Query's).
	Attempt int
	// TaskExecutorID is the TaskExecutor it was deployed to, if known.
	TaskExecutorID string
	// Why says which.
	Why string
}

func (e *OutputNotFoundError) Error() string {
	return "dispatcher: no output of the attempt: " + e.Why
}

// UnreachableError says that the TaskExecutor that keeps the output did
// not answer.
type UnreachableError struct {
	TaskExecutorID string
	Err            error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("dispatcher: TaskExecutor %s did not answer: %v", e.TaskExecutorID, e.Err)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// endedPlacements is an ended job whose placements are kept, since at.
type endedPlacements struct {
	j  *job
	p  *jobmaster.Placements
	at time.Time
}

// keepPlacementsLocked keeps where an ended job's attempts ran, for the
// output retention; d.mu must be held.
func (d *Dispatcher) keepPlacementsLocked(ld *leadership, j *job, p *jobmaster.Placements) {
	if p == nil {
		return
	}
	j.placements = p
	ld.placed = append(ld.placed, endedPlacements{j: j, p: p, at: time.Now()})
	ld.placedSubtasks += p.Subtasks()
	d.expirePlacementsLocked(ld)
}

// expirePlacementsLocked forgets the placements of ended jobs past the
// retention, and the oldest beyond the bound; d.mu must be held. Nothing
// wakes up for it: it runs as placements are kept and read.
func (d *Dispatcher) expirePlacementsLocked(ld *leadership) {
	now := time.Now()
	for len(ld.placed) > 0 {
		e := ld.placed[0]
		if ld.placedSubtasks <= d.cfg.OutputSubtasks && now.Sub(e.at) < d.cfg.OutputRetention {
			return
		}
		if e.j.placements == e.p {
			e.j.placements = nil
		}
		ld.placedSubtasks -= e.p.Subtasks()
		ld.placed[0] = endedPlacements{}
		ld.placed = ld.placed[1:]
	}
}

// locate finds where the attempt q names was deployed.
func (d *Dispatcher) locate(ctx context.Context, ld *leadership, j *job, q OutputQuery) (jobmaster.Placement, error) {
	d.mu.Lock()
	d.expirePlacementsLocked(ld)
	placements, r, result, runID := j.placements, j.runner, j.result, j.runID
	d.mu.Unlock()
	if placements != nil {
		return placements.Find(q.VertexID, q.SubtaskIndex, q.Attempt)
	}
	if result != nil {
		// Ended before this leader took over, or long enough ago that
		// its placements are forgotten: where its attempts ran is kept
		// with its result, which knows no graph to check the vertex
		// against.
		return jobmaster.PlacementsOf(result.GetPlacements()).Find(q.VertexID, q.SubtaskIndex, q.Attempt)
	}
	if r != nil {
		if jm := r.JobMaster(); jm != nil {
			p, err := jm.Locate(ctx, q.VertexID, q.SubtaskIndex, q.Attempt)
			if err == nil || errors.Is(err, jobmaster.ErrUnknownVertex) || errors.Is(err, jobmaster.ErrSubtaskOutOfRange) ||
				errors.Is(err, jobmaster.ErrNotPlaced) || ctx.Err() != nil {
				return p, err
			}
			// The JobMaster stopped meanwhile: as without one.
		}
	}
	// No JobMaster runs the job (not yet, or between two): nothing is
	// deployed that is known here. Its plan, read from the store (a job
	// waiting for slots keeps none), still tells a wrong vertex.
	plan, err := d.cfg.Store.GetExecutionPlan(ctx, q.JobID)
	if err != nil && ctx.Err() != nil {
		return jobmaster.Placement{}, ctx.Err()
	}
	if err == nil && plan.GetRunId() == runID {
		found := false
		for _, v := range plan.GetJobGraph().GetVertices() {
			if v.GetId() != q.VertexID {
				continue
			}
			found = true
			if q.SubtaskIndex < 0 || q.SubtaskIndex >= int(v.GetParallelism()) {
				return jobmaster.Placement{}, jobmaster.ErrSubtaskOutOfRange
			}
		}
		if !found {
			return jobmaster.Placement{}, jobmaster.ErrUnknownVertex
		}
	}
	return jobmaster.Placement{}, jobmaster.ErrNotPlaced
}

// TaskOutput reads the output of the attempt q names from the
// TaskExecutor that keeps it. It fails with ErrJobNotFound,
// jobmaster.ErrUnknownVertex, jobmaster.ErrSubtaskOutOfRange, an
// *OutputNotFoundError, an *UnreachableError or ErrNotLeading.
func (d *Dispatcher) TaskOutput(ctx context.Context, q OutputQuery) (*jobplanev1.GetTaskOutputResponse, error) {
	ld, j, err := d.find(ctx, q.JobID)
	if err != nil {
		return nil, err
	}
	p, err := d.locate(ctx, ld, j, q)
	switch {
	case errors.Is(err, jobmaster.ErrNotPlaced):
		return nil, &OutputNotFoundError{Query: q, Attempt: q.Attempt, Why: "the attempt was not deployed, or where it was is no longer known"}
	case err != nil:
		return nil, err
	}
	if err := d.stillLeading(ld); err != nil {
		return nil, err
	}
	notFound := &OutputNotFoundError{Query: q, Attempt: p.Attempt, TaskExecutorID: p.TaskExecutorID}
	address, ok := "", false
	if d.cfg.TaskExecutors != nil {
		address, ok = d.cfg.TaskExecutors.TaskExecutorAddress(p.TaskExecutorID)
	}
	lastKnown := false
	if !ok && p.Address != "" {
		// Not registered (yet, or any more): a TaskExecutor that keeps
		// output on disk may answer at its old address.
		address, ok, lastKnown = p.Address, true, true
	}
	if !ok || d.cfg.HTTPClient == nil {
		notFound.Why = "TaskExecutor " + p.TaskExecutorID + " is no longer registered"
		return nil, notFound
	}
	cctx, cancel := context.WithTimeout(ctx, outputCallTimeout)
	defer cancel()
	te := clusterv1connect.NewTaskExecutorServiceClient(d.cfg.HTTPClient, address, d.cfg.ClientOptions...)
	resp, err := te.GetTaskOutput(cctx, &clusterv1.GetTaskOutputRequest{
		JobId:    q.JobID,
		Attempt:  &jobplanev1.ExecutionAttemptId{VertexId: q.VertexID, SubtaskIndex: int32(q.SubtaskIndex), AttemptNumber: int32(p.Attempt)},
		Offset:   q.Offset,
		MaxBytes: q.MaxBytes,
	})
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_EXECUTION_NOT_FOUND):
		notFound.Why = "TaskExecutor " + p.TaskExecutorID + " no longer keeps it"
		return nil, notFound
	case connect.CodeOf(err) == connect.CodeUnimplemented:
		notFound.Why = "TaskExecutor " + p.TaskExecutorID + " keeps no output (it lacks GetTaskOutput)"
		return nil, notFound
	case lastKnown:
		// Nothing answers for an unregistered TaskExecutor: it is gone,
		// not merely slow, as far as anyone can tell.
		notFound.Why = "TaskExecutor " + p.TaskExecutorID + " is no longer registered, and its last known address did not answer"
		return nil, notFound
	case connect.CodeOf(err) == connect.CodeUnavailable, connect.CodeOf(err) == connect.CodeDeadlineExceeded:
		return nil, &UnreachableError{TaskExecutorID: p.TaskExecutorID, Err: err}
	default:
		return nil, fmt.Errorf("dispatcher: reading output at TaskExecutor %s: %w", p.TaskExecutorID, err)
	}
	if err := d.stillLeading(ld); err != nil {
		return nil, err
	}
	return &jobplanev1.GetTaskOutputResponse{
		Data: resp.GetData(), Offset: resp.GetOffset(), NextOffset: resp.GetNextOffset(),
		DroppedBytes: max(resp.GetOffset()-q.Offset, 0), EndOffset: resp.GetEndOffset(), Ended: resp.GetEnded(),
		AttemptNumber: int32(p.Attempt), TaskExecutorId: p.TaskExecutorID,
	}, nil
}

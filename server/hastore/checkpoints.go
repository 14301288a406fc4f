package hastore

import (
	"context"
	"errors"
	"fmt"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
)

// Errors of checkpoints and savepoints. Match them with errors.Is.
var (
	// ErrCheckpointsUnsupported is returned by a Checkpoints whose store
	// keeps no checkpoints after all: a remote store that does not
	// implement the checkpoint calls (HAStoreService before 1.2). The
	// caller runs the job without checkpoints.
	ErrCheckpointsUnsupported = errors.New("hastore: the HA store keeps no checkpoints")
	// ErrCheckpointIDNotIncreasing: the checkpoint's or savepoint's id is
	// not greater than every id the job's checkpoints and savepoints used.
	// A store returns it as a *CheckpointIDError.
	ErrCheckpointIDNotIncreasing = errors.New("hastore: checkpoint id not greater than the job's last")
	// ErrSavepointNotFound: no savepoint with the id is stored.
	ErrSavepointNotFound = errors.New("hastore: savepoint not found")
	// ErrSavepointExists: another savepoint with the id is stored.
	ErrSavepointExists = errors.New("hastore: another savepoint with the id exists")
)

// Checkpoint limits.
const (
	// MaxRetainedCheckpoints is the most completed checkpoints a store
	// keeps per job.
	MaxRetainedCheckpoints = 100
	// MaxSavepointIDLength is the longest savepoint id.
	MaxSavepointIDLength = 128
	// MaxStatePointerLength is the longest state pointer (a URL).
	MaxStatePointerLength = 2048
)

// Checkpoints is implemented by a store that also keeps jobs' completed
// checkpoints and savepoints: Flink's CompletedCheckpointStore and
// CheckpointIDCounter. See HAStoreService in ha_store_service.proto for
// the rules, which every implementation enforces in the same atomic step
// as the write:
//   - AddCheckpoint and AddSavepoint are fenced by the job's own election
//     (election.Job of the checkpoint's job); any other fence is invalid
//     (ErrInvalidArgument).
//   - Ids strictly increase per job: a checkpoint or savepoint whose id is
//     not greater than the job's last id fails with
//     ErrCheckpointIDNotIncreasing, unless it is the same (Same) as the
//     stored one of the same id (a retry: success, nothing changes).
//   - A checkpoint is added only while the job has a plan
//     (ErrPlanNotFound) and no result entry (ErrJobTerminal, a
//     *JobTerminalError).
//   - The checkpoints beyond the newest retain are removed in the same
//     write that adds a newer one.
//   - DeleteExecutionPlan, and FinishJob, remove the job's checkpoints
//     and last id with its plan, in the same write.
//   - Savepoints outlive their job; DeleteSavepoint, fenced by the
//     jobmanager election, removes them.
//
// Stores that do not implement it run jobs without checkpoints.
type Checkpoints interface {
	// AddCheckpoint stores cp and removes the job's oldest checkpoints
	// beyond the newest retain (cp included; 0 means 1), returning the ids
	// removed.
	AddCheckpoint(ctx context.Context, f Fence, cp *hastorev1.CompletedCheckpoint, retain int) (subsumed []uint64, err error)
	// LatestCheckpoint returns the job's stored checkpoint of the greatest
	// id (nil if none) and the greatest id its checkpoints and savepoints
	// ever used (0 if none).
	LatestCheckpoint(ctx context.Context, jobID string) (cp *hastorev1.CompletedCheckpoint, lastID uint64, err error)
	// ListCheckpoints returns up to limit of the job's stored checkpoints
	// in id order, starting after id `after` (0 for the first page). A
	// limit of 0 means all.
	ListCheckpoints(ctx context.Context, jobID string, after uint64, limit int) ([]*hastorev1.CompletedCheckpoint, error)

	// AddSavepoint stores sp; its checkpoint id counts in the job's last
	// id. An equal savepoint under the same id is no error; another one is
	// ErrSavepointExists.
	AddSavepoint(ctx context.Context, f Fence, sp *hastorev1.Savepoint) error
	// GetSavepoint returns the savepoint, or ErrSavepointNotFound.
	GetSavepoint(ctx context.Context, id string) (*hastorev1.Savepoint, error)
	// ListSavepoints returns up to limit savepoints in id order, starting
	// after the id `after` ("" for the first page), only jobID's unless it
	// is empty. A limit of 0 means all.
	ListSavepoints(ctx context.Context, jobID, after string, limit int) ([]*hastorev1.Savepoint, error)
	// DeleteSavepoint removes the savepoint; an absent one is no error.
	DeleteSavepoint(ctx context.Context, f Fence, id string) error
}

// CheckpointIDError is the refusal of a checkpoint or savepoint whose id
// is not greater than the job's last id. errors.Is(err,
// ErrCheckpointIDNotIncreasing) is true for it.
type CheckpointIDError struct {
	// JobID is the job's id.
	JobID string
	// ID is the refused checkpoint id.
	ID uint64
	// Last is the job's last id as the store knew it when it refused; 0
	// when a remote store did not say.
	Last uint64
}

func (e *CheckpointIDError) Error() string {
	return fmt.Sprintf("hastore: checkpoint id %d of job %s is not greater than its last, %d", e.ID, e.JobID, e.Last)
}

// Is makes errors.Is(err, ErrCheckpointIDNotIncreasing) true for a
// CheckpointIDError.
func (e *CheckpointIDError) Is(target error) bool { return target == ErrCheckpointIDNotIncreasing }

// ValidateCheckpointWrite checks an AddCheckpoint: a fence of the
// checkpoint's own job election, a well-formed checkpoint whose encoding
// (size bytes) does not exceed maxBytes, and retain within 0 to
// MaxRetainedCheckpoints.
func ValidateCheckpointWrite(f Fence, cp *hastorev1.CompletedCheckpoint, retain, size, maxBytes int) error {
	var v validation
	if cp == nil {
		v.fence("fence", f)
		v.add("checkpoint", "required")
		return v.err()
	}
	v.jobFence("fence", f, cp.GetJobId())
	v.jobID("checkpoint.job_id", cp.GetJobId())
	if cp.GetCheckpointId() == 0 {
		v.add("checkpoint.checkpoint_id", "must be positive")
	}
	v.states("checkpoint.states", cp.GetStates())
	v.canonical("checkpoint", cp.ProtoReflect())
	if retain < 0 || retain > MaxRetainedCheckpoints {
		v.add("retain", fmt.Sprintf("%d: want 0 to %d", retain, MaxRetainedCheckpoints))
	}
	if size > maxBytes {
		v.add("checkpoint", fmt.Sprintf("encoded checkpoint is %d bytes, over the limit of %d", size, maxBytes))
	}
	return v.err()
}

// ValidateSavepointWrite checks an AddSavepoint as ValidateCheckpointWrite
// checks a checkpoint, and its savepoint id.
func ValidateSavepointWrite(f Fence, sp *hastorev1.Savepoint, size, maxBytes int) error {
	var v validation
	if sp == nil {
		v.fence("fence", f)
		v.add("savepoint", "required")
		return v.err()
	}
	v.jobFence("fence", f, sp.GetJobId())
	v.savepointID("savepoint.savepoint_id", sp.GetSavepointId())
	v.jobID("savepoint.job_id", sp.GetJobId())
	if sp.GetCheckpointId() == 0 {
		v.add("savepoint.checkpoint_id", "must be positive")
	}
	v.states("savepoint.states", sp.GetStates())
	v.canonical("savepoint", sp.ProtoReflect())
	if size > maxBytes {
		v.add("savepoint", fmt.Sprintf("encoded savepoint is %d bytes, over the limit of %d", size, maxBytes))
	}
	return v.err()
}

// ValidateSavepointDelete checks a DeleteSavepoint: a fence of the
// jobmanager election, whose savepoints belong to the user, and a
// savepoint id.
func ValidateSavepointDelete(f Fence, id string) error {
	var v validation
	v.dataFence("fence", f)
	v.savepointID("savepoint_id", id)
	return v.err()
}

// ValidateSavepointID checks a savepoint id: 1 to MaxSavepointIDLength
// bytes.
func ValidateSavepointID(id string) error {
	var v validation
	v.savepointID("savepoint_id", id)
	return v.err()
}

// ValidateCheckpointList checks a ListCheckpoints's job id and limit.
func ValidateCheckpointList(jobID string, limit int) error {
	var v validation
	v.jobID("job_id", jobID)
	if limit < 0 {
		v.add("page_size", "must not be negative")
	}
	return v.err()
}

// ValidateSavepointList checks a ListSavepoints's filter (a job id, or
// empty for all) and page arguments.
func ValidateSavepointList(jobID, after string, limit int) error {
	var v validation
	if jobID != "" {
		v.jobID("job_id", jobID)
	}
	if len(after) > MaxSavepointIDLength {
		v.add("page_token", fmt.Sprintf("longer than %d bytes", MaxSavepointIDLength))
	}
	if limit < 0 {
		v.add("page_size", "must not be negative")
	}
	return v.err()
}

// jobFence checks the fence of a checkpoint or savepoint write: well
// formed, and of the election of the job the write is for, whose token
// alone covers the job's checkpoints.
func (v *validation) jobFence(field string, f Fence, jobID string) {
	v.fence(field, f)
	if want := election.Job(jobID); f.Election != want && ValidElection(f.Election) {
		v.add(field+".election", fmt.Sprintf("%q: the checkpoints and savepoints of job %q are written only by the leader of %q", f.Election, jobID, want))
	}
}

func (v *validation) savepointID(field, id string) {
	if len(id) == 0 || len(id) > MaxSavepointIDLength {
		v.add(field, fmt.Sprintf("%q: want 1 to %d bytes", id, MaxSavepointIDLength))
	}
}

// states checks the subtask states of a checkpoint or savepoint: each
// names a vertex and a subtask index, at most one per subtask, and a
// pointer, if set, of 1 to MaxStatePointerLength bytes.
func (v *validation) states(field string, states []*jobplanev1.SubtaskState) {
	type subtask struct {
		vertex string
		index  int32
	}
	seen := make(map[subtask]bool, len(states))
	for i, st := range states {
		at := fmt.Sprintf("%s[%d]", field, i)
		if st.GetVertexId() == "" {
			v.add(at+".vertex_id", "required")
		}
		if st.GetSubtaskIndex() < 0 {
			v.add(at+".subtask_index", "must not be negative")
		}
		if p, ok := st.GetState().(*jobplanev1.SubtaskState_Pointer); ok && (len(p.Pointer) == 0 || len(p.Pointer) > MaxStatePointerLength) {
			v.add(at+".pointer", fmt.Sprintf("%d bytes: want 1 to %d", len(p.Pointer), MaxStatePointerLength))
		}
		key := subtask{st.GetVertexId(), st.GetSubtaskIndex()}
		if seen[key] {
			v.add(at, fmt.Sprintf("a second state of subtask %d of vertex %q", key.index, key.vertex))
		}
		seen[key] = true
	}
}

package hastore

import (
	"context"
	"errors"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
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
//     ErrCheckpointIDNotIncreasing, unless it equals (proto.Equal) the
//     stored one of the same id (a retry: success, nothing changes).
//   - A checkpoint is added only while the job has a plan
//     (ErrPlanNotFound) and no result entry (ErrJobTerminal, a
//     *JobTerminalError).
//   - The checkpoints beyond the newest retain are removed in the same
//     write that adds a newer one.
//   - DeleteExecutionPlan removes the job's checkpoints and last id.
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

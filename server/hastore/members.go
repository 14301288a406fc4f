package hastore

import (
	"context"
	"errors"
	"fmt"
)

// ErrMembersUnsupported is returned by a Members whose store keeps no
// membership after all: a remote store that does not implement the
// membership calls (HAStoreService before 1.2). The caller goes on
// without a membership.
var ErrMembersUnsupported = errors.New("the HA store keeps no TaskExecutor membership")

// MaxTaskExecutorIDLength is the longest TaskExecutor id a Members store
// records.
const MaxTaskExecutorIDLength = 128

// Members is implemented by a store that also keeps the cluster's
// TaskExecutor membership: the ids of the TaskExecutors that may hold
// attempts of some job. A ResourceManager records a TaskExecutor before it
// answers its registration (so before any JobMaster can deploy there), and
// removes it only once every task lease the TaskExecutor was granted has
// certainly ended. A JobMaster that takes a job over then knows every
// TaskExecutor that may still run an attempt of it: once each has said
// what it holds, a subtask none holds is deployed at once, without
// waiting out the task lease.
//
// Writes are fenced by the jobmanager election's token, like plans and
// results. Stores that do not implement it leave adoption to wait out the
// lease for every subtask not found.
type Members interface {
	// AddTaskExecutor records TaskExecutor id. Recording it again is no
	// error.
	AddTaskExecutor(ctx context.Context, f Fence, id string) error
	// RemoveTaskExecutor removes TaskExecutor id; an absent one is no
	// error.
	RemoveTaskExecutor(ctx context.Context, f Fence, id string) error
	// TaskExecutors returns the recorded ids, in id order.
	TaskExecutors(ctx context.Context) ([]string, error)
}

// ValidateMemberWrite checks a membership write: a fence of the jobmanager
// election and an id of 1 to MaxTaskExecutorIDLength bytes.
func ValidateMemberWrite(f Fence, id string) error {
	var v validation
	v.dataFence("fence", f)
	if len(id) == 0 || len(id) > MaxTaskExecutorIDLength {
		v.add("task_executor_id", fmt.Sprintf("%q: want 1 to %d bytes", id, MaxTaskExecutorIDLength))
	}
	return v.err()
}

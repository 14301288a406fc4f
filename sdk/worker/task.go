package worker

import (
	"context"
	"log/slog"
)

// Task is what a Func gets to run one subtask: one execution attempt of
// one parallel instance of a vertex.
type Task struct {
	// JobID is the job's id.
	JobID string
	// VertexID is the vertex's id in the JobGraph.
	VertexID string
	// SubtaskIndex is this subtask's index, from 0 to Subtasks-1.
	SubtaskIndex int
	// Subtasks is the vertex's parallelism.
	Subtasks int
	// Attempt counts the subtask's execution attempts, from 0: a restart
	// runs the subtask again with the next number.
	Attempt int
	// Config is the vertex's configuration, verbatim from the JobGraph.
	Config map[string]string
	// Logger writes into the attempt's output, whose tail the
	// TaskExecutor keeps and clients read (jobplane logs).
	Logger *slog.Logger
}

// Func runs one subtask. It returns nil when the subtask finished, and an
// error when it failed (the job's restart strategy decides what follows).
// ctx is canceled when the attempt is canceled (CancelTask) or the worker
// shuts down; the Func must then return promptly.
type Func func(ctx context.Context, task Task) error

package worker

import (
	"cmp"
	"context"
	"io"
	"log/slog"

	"github.com/jobplane/jobplane/sdk/taskexecutor"
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
	// Logger writes text lines (slog's text format, from level Info on)
	// into the attempt's output, whose tail the worker keeps and clients
	// read (DispatcherService.GetTaskOutput, jobplane logs).
	Logger *slog.Logger
	// Output receives raw bytes into the attempt's output, beside
	// Logger's lines: fmt.Fprintf(task.Output, ...) is how a Func prints.
	// The worker process's own standard output and error (fmt.Printf,
	// os.Stdout, the log package's default logger) are not captured: a
	// worker runs many tasks at once, and those streams belong to none of
	// them. Writes never fail, and are dropped once the attempt has
	// ended. Never nil (io.Discard for a Task made by NewTask without a
	// TaskExecutor's).
	Output io.Writer
	// Restored is the subtask's state from the job's latest completed
	// checkpoint, which it goes on from; nil when it starts afresh (the
	// job's first run, or no checkpoint completed yet). RestoredFrom names
	// that checkpoint (its id).
	Restored     *State
	RestoredFrom string

	onCheckpoint func(taskexecutor.SnapshotFunc)
	setValue     func([]byte)
	add          func(string, int64)
}

// State is a subtask's part of a checkpoint: Data, kept with the
// checkpoint in the HA store (64 KiB at most, by default), or a Pointer to
// state the task wrote elsewhere (a file or object URL), which jobplane
// keeps and hands back but never reads.
type State = taskexecutor.State

// OnCheckpoint registers fn to give the task's state whenever the job
// checkpoints (JobConfig.checkpoints); a later call replaces it. fn runs
// on its own goroutine while the Func runs, so it must synchronize with
// it; an error declines the checkpoint. Until a task registers a
// function, its checkpoints keep the state it was restored from.
//
// A task that counts, say, keeps its count in an atomic.Int64, starts
// from Restored, and registers a function that returns the count.
func (t Task) OnCheckpoint(fn func(ctx context.Context, checkpointID uint64) (State, error)) {
	if t.onCheckpoint != nil {
		t.onCheckpoint(fn)
	}
}

// SetValue sets the value the subtask returns when its Func returns nil:
// the job's result carries it (JobResult.values, `jobplane result`). A
// later call replaces it; the bytes are copied. A value over the
// cluster's limit (ServerLimits.max_task_value_bytes, 64 KiB by default)
// fails the attempt, and the values of a job's subtasks together must stay
// within max_result_value_bytes (512 KiB by default) or the job fails.
// The value of an attempt that fails or is canceled is dropped.
func (t Task) SetValue(value []byte) {
	if t.setValue != nil {
		t.setValue(value)
	}
}

// Add adds delta to the subtask's accumulator name, a named counter: the
// job's result carries, per name, the sum over its subtasks of their
// finished attempts' totals (JobResult.accumulators), so a restarted
// subtask never counts twice. A name must be 1 to 128 bytes of
// [A-Za-z0-9_.-], and a job may use at most max_accumulators names (1000
// by default); an invalid name fails the attempt when it finishes, and
// too many names fail it or the job. Add is safe to call from several
// goroutines.
func (t Task) Add(name string, delta int64) {
	if t.add != nil {
		t.add(name, delta)
	}
}

// Func runs one subtask. It returns nil when the subtask finished, and an
// error when it failed (the job's restart strategy decides what follows).
// ctx is canceled when the attempt is canceled (CancelTask) or the worker
// shuts down; the Func must then return promptly.
type Func func(ctx context.Context, task Task) error

// NewTask returns the Task a Func gets to run the TaskExecutor's task t,
// logging to logger: for programs that run Funcs on a TaskExecutor of
// their own rather than a Worker.
func NewTask(t taskexecutor.Task, logger *slog.Logger) Task {
	return Task{
		JobID: t.JobID, VertexID: t.VertexID, SubtaskIndex: t.SubtaskIndex, Subtasks: t.Subtasks,
		Attempt: t.Attempt, Config: t.Config, Logger: logger, Output: cmp.Or[io.Writer](t.Output, io.Discard),
		Restored: t.Restored, RestoredFrom: t.RestoredFrom, onCheckpoint: t.OnCheckpoint,
		setValue: t.SetValue, add: t.Add,
	}
}

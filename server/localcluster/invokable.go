package localcluster

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"

	"github.com/jobplane/jobplane/sdk/taskexecutor"
	"github.com/jobplane/jobplane/sdk/worker"
)

// invokable adapts the task function name to the TaskExecutor, as a
// worker does: it gets the attempt as a worker.Task, and a panic fails the
// attempt instead of the process. Its logger writes both into the
// attempt's kept output (what GetTaskOutput and `jobplane logs` read) and
// to the cluster's logger, with the attempt's job, vertex, subtask and
// attempt as attributes.
func invokable(name string, f worker.Func, log *slog.Logger) taskexecutor.Invokable {
	return func(ctx context.Context, t taskexecutor.Task) (err error) {
		logger := log.With("job", t.JobID, "vertex", t.VertexID, "subtask", t.SubtaskIndex, "attempt", t.Attempt)
		if t.Logger != nil {
			logger = slog.New(slog.NewMultiHandler(t.Logger.Handler(), logger.Handler()))
		}
		defer func() {
			if p := recover(); p != nil {
				logger.Error("task panicked", "invokable", name, "panic", p, "stack", string(debug.Stack()))
				err = fmt.Errorf("%s panicked: %v", name, p)
			}
		}()
		return f(ctx, worker.NewTask(t, logger))
	}
}

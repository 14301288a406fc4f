package localcluster

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"

	"github.com/jobplane/jobplane/sdk/worker"
	"github.com/jobplane/jobplane/server/taskexecutor"
)

// invokable adapts a task function to the TaskExecutor: it gets the
// attempt as a worker.Task, with a logger that names the attempt, and a
// panic fails the attempt instead of the process.
func invokable(f worker.Func, log *slog.Logger) taskexecutor.Invokable {
	return func(ctx context.Context, t taskexecutor.Task) (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("task function panicked: %v\n%s", r, debug.Stack())
			}
		}()
		return f(ctx, worker.Task{
			JobID: t.JobID, VertexID: t.VertexID, SubtaskIndex: t.SubtaskIndex, Subtasks: t.Subtasks, Attempt: t.Attempt,
			Config: t.Config,
			Logger: log.With("job", t.JobID, "vertex", t.VertexID, "subtask", t.SubtaskIndex, "attempt", t.Attempt),
		})
	}
}

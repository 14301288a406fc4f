// Package worker runs your own Go functions as jobplane tasks: a
// TaskExecutor that registers the functions by invokable name, joins a
// cluster and runs the subtasks its JobMasters deploy. Registration,
// heartbeats, slot offers and fencing are the package's business.
//
// A worker program registers its functions and runs until it is told to
// stop:
//
//	w, err := worker.New(worker.Config{Server: "http://127.0.0.1:8080", Slots: 2})
//	if err != nil { ... }
//	w.Register("wordcount", func(ctx context.Context, t worker.Task) error {
//		t.Logger.Info("counting", "subtask", t.SubtaskIndex, "of", t.Subtasks)
//		return nil
//	})
//	err = w.Run(ctx) // until ctx is done
//
// A job then runs the function by naming it as a vertex's invokable; the
// cluster deploys the vertex's subtasks to TaskExecutors that offer every
// invokable the job needs, so a job using "wordcount" runs on workers that
// registered it. A new job naming an invokable that no registered
// TaskExecutor offers is refused at submission (FAILED_PRECONDITION,
// INVOKABLE_NOT_OFFERED, which lists the invokables that are offered),
// unless no TaskExecutor is registered at all: the job is then accepted
// and waits for one, and if the TaskExecutors that join do not offer its
// invokables either, its subtasks fail (UNKNOWN_INVOKABLE) rather than
// wait for ever.
//
// # The cluster
//
// Config.Server is the base URL at which the cluster serves HAStoreService:
// `jobplane standalone` and `jobplane jobmanager` serve their store there,
// and `jobplane hastore` serves a shared one. The worker finds the
// ResourceManager's leader through it and follows every change of leader,
// so it survives JobManager failovers; while the server cannot be reached
// it keeps trying. The cluster calls the worker back at Config.Advertise
// (by default the address it listens on, Config.Listen), so that address
// must be reachable from the JobManagers: the default listener,
// 127.0.0.1:0, only serves a cluster on the same machine.
//
// # Functions
//
// A Func runs one subtask (one execution attempt of one parallel instance
// of a vertex) and reports how it ended by its return value: nil for
// FINISHED, an error for FAILED (the message travels to the job's failure
// history, and the job's restart strategy decides what follows). A panic
// fails the subtask with the panic's value, and does not stop the worker.
// Its context is canceled when the attempt is canceled (the job was
// canceled, failed elsewhere or is restarting, or its JobMaster lost its
// leadership) and when the worker stops; the Func must then return
// promptly. The same subtask may run again after a JobManager crash
// (tasks are at-least-once), but never twice at once under one cluster.
//
// A worker runs at most Config.Slots subtasks at once, of any jobs.
// Besides the registered functions it offers the built-in invokables
// noop, sleep, fail and count, and exec only when Config.AllowExec is set
// (without it the worker does not offer exec at all).
//
// # Stopping
//
// Run returns once its context is done: it cancels the running subtasks,
// waits for their Funcs to return, and closes its listener. Subtasks it
// stopped this way are reported to their JobMasters as canceled, and the
// job's restart strategy decides what follows (another worker may run
// them again).
//
// The package links no store backend (no etcd), only the contract's
// generated clients and the TaskExecutor it is built on.
package worker

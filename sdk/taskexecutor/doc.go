// Package taskexecutor is the TaskExecutor: it offers slots, runs the
// execution attempts that JobMasters deploy into them, and reports every
// state change. It finds the ResourceManager through the HA store,
// registers and heart-beats there, and follows a new leader when one is
// elected.
//
// It is the runtime that package worker ships to users and that the
// server runs for its own TaskExecutors (jobplane taskexecutor, the local
// ones of jobplane standalone); it lives in the SDK module so that a
// user's worker links no server code.
//
// It enforces the contract's fencing on its side: a call with a
// ResourceManager or JobMaster token older than the newest it has seen is
// refused, and once a job's JobMaster token changes, the attempts deployed
// under the older one are canceled and never reported. The
// ResourceManager's token it observes in the HA store counts as seen, and
// a newer one is taken only once the store shows it as the grant of
// `jobmanager` (waiting for the observation at most grantWait, 2s): a
// caller cannot make up a newer token and lock the ResourceManager out.
// A JobMaster token is taken as it comes in RequestSlot(s) under the
// current ResourceManager token; on a JobMaster's own call, a token other
// than the job's current one is taken only once the store shows it as the
// grant of `job/<job_id>` (one read within grantWait: Leader where the
// store is an election.Reader, the first answer of ObserveLeader
// otherwise; the jobs of one AdoptAttempts are read in parallel), so
// a caller cannot make up a newer token that cancels a job's attempts and
// locks its JobMaster out. A call under the job's current token reads
// nothing.
//
// # Task output
//
// Each attempt's output (Task.Logger's lines, Task.Output's bytes, an exec
// command's stdout and stderr; not the process's own standard output) is
// kept as a tail of Config.OutputBytes (64 KiB by default) and served by
// TaskExecutorService.GetTaskOutput. In memory, it is kept for
// Config.OutputRetention (10 minutes) after the attempt ended and among
// the last Config.OutputAttempts (512) ended attempts. With
// Config.OutputDir, it is kept in files there instead, for 24 hours and
// within Config.OutputMaxBytes (256 MiB), and a TaskExecutor started again
// on the directory serves what ended before. Expired output is dropped as
// attempts start and end and as output is read: no timer runs for it.
//
// # Exec tasks and their processes
//
// The built-in exec invokable runs what any authorized submitter asks: a
// job's vertex names a command, and the TaskExecutor runs it, as its own
// user unless ExecConfig.Credential names another. It is off unless
// Config.AllowExec is set. Once on, each attempt's command runs in a
// working directory of its own, created fresh under ExecConfig.Dir and
// removed when the attempt ends, with a clean environment: ExecPath, HOME
// and TMPDIR in that directory, the attempt's JOBPLANE_* variables, the
// TaskExecutor's variables that ExecConfig.PassEnv names, and the task's
// own env (see ExecConfig). None of this is a sandbox: the command may do
// whatever its user may.
//
// What happens to the processes the command starts depends on the
// platform:
//
//   - Linux: the command runs under a shim, the running binary re-executed
//     (whatever program links this package: jobplane, a test binary, a
//     user's program; an init function in this package turns it into the
//     shim before main). The shim leads a new process group holding the
//     command and every descendant that does not leave it (setsid,
//     setpgid). When the task ends, or when the TaskExecutor process dies,
//     even by SIGKILL, the whole group is SIGKILLed: the shim learns of its
//     parent's death through PR_SET_PDEATHSIG. A canceled task's group gets
//     SIGTERM, and SIGKILL once the cancel grace (DefaultCancelGrace)
//     passed without the command exiting. Not covered: processes that left
//     the group, and the group when the shim itself is SIGKILLed from
//     outside and the TaskExecutor dies before it can kill the group.
//     Package init functions that run before this package's also run in
//     the shim, so they must not have effects a second process would
//     repeat.
//     With ExecConfig.Credential, the shim keeps the TaskExecutor's user
//     (it must re-execute the running binary) and starts the command as
//     the credential's user and group.
//   - Other Unix systems: the command leads a process group of its own,
//     with the same cancel and end-of-task handling, but nothing kills the
//     group when the TaskExecutor process dies.
//   - Elsewhere: a cancel kills the command's process only (its children
//     may survive), and nothing kills it when the TaskExecutor dies.
package taskexecutor

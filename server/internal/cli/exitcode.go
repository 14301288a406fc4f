package cli

import jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"

// Exit codes of the client verbs. The jobplane binary's server
// subcommands share exitOK, exitError and exitUsage; the verbs that follow
// a job to its end (submit, wait) exit with the code of the job's final
// status.
const (
	// exitOK: done; for submit and wait, the job FINISHED.
	exitOK = 0
	// exitError: the command failed: the cluster could not be reached,
	// refused the request, or the job was not found.
	exitError = 1
	// exitUsage: bad flags or arguments.
	exitUsage = 2
	// exitJobFailed: the job ended FAILED.
	exitJobFailed = 3
	// exitJobCanceled: the job ended CANCELED.
	exitJobCanceled = 4
	// exitInvalidJob: the job file is not a valid JobGraph (bad YAML or
	// JSON, an unknown field, a rule of the contract broken), names an
	// invokable that no TaskExecutor of the cluster offers, or the cluster
	// refused it as invalid or for its invokables; nothing was submitted.
	exitInvalidJob = 5
	// exitDetached: the command stopped following the job on an interrupt
	// (Ctrl-C, then "detach"; or SIGINT without a terminal); the job goes
	// on in the cluster.
	exitDetached = 6
	// exitUnauthenticated: the cluster wants a valid token and did not
	// get one (UNAUTHENTICATED).
	exitUnauthenticated = 7
	// exitPermissionDenied: the cluster's policy refused the request to
	// the token's principal (PERMISSION_DENIED).
	exitPermissionDenied = 8
)

// exitCodeOf is the exit code for a job that ended with status s: 0 for
// FINISHED, exitJobFailed, exitJobCanceled, and exitError for any other.
func exitCodeOf(s jobplanev1.JobStatus) int {
	switch s {
	case jobplanev1.JobStatus_JOB_STATUS_FINISHED:
		return exitOK
	case jobplanev1.JobStatus_JOB_STATUS_FAILED:
		return exitJobFailed
	case jobplanev1.JobStatus_JOB_STATUS_CANCELED:
		return exitJobCanceled
	default:
		return exitError
	}
}

// codeError ends a client verb with an exit code; err, when not nil, is
// printed first on standard error (by the binary's main: see
// AddCommands).
type codeError struct {
	code int
	err  error
}

// Error returns err's message, or "" when there is nothing to print.
func (e *codeError) Error() string {
	if e.err == nil {
		return ""
	}
	return e.err.Error()
}

// Unwrap returns err.
func (e *codeError) Unwrap() error { return e.err }

// ExitCode returns the process exit code.
func (e *codeError) ExitCode() int { return e.code }

// exit returns an error that ends the command with code after printing
// err (if not nil).
func exit(code int, err error) error { return &codeError{code: code, err: err} }

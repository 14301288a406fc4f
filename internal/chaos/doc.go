// Package chaos records what clients of a jobplane cluster saw while
// processes were killed, paused and restarted under them, and checks the
// record against the contract's promises.
//
// Record, then check: a Recorder logs every Dispatcher call a client made
// (SubmitJob, CancelJob, GetJob, GetJobResult) with the times it was
// called and answered, and CheckHistory runs the porcupine
// linearizability checker over the log with Model, one partition per job
// id: no acknowledged job is lost, each job reaches exactly one terminal
// status, an acknowledged cancel ends the job CANCELED, and only one
// submission of a job is told it created it. The chaos loop also checks
// the TaskExecutors' attempt logs with hacluster.CheckAttempts: no subtask
// ran under two JobMasters, or twice under one, at the same time.
//
// The package starts no process and talks to no cluster itself; the
// chaos loop that drives a cluster lives in its tests.
package chaos

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
// submission of a job is told it created it. The TaskExecutors' attempt
// logs are checked too: ReadAttemptLog (or Attempts, for the processes
// of a localcluster.ProcessCluster) reads them, and CheckAttempts checks
// that no subtask ran under two JobMasters, or twice under one, at the
// same time; the chaos loop and the failover tests (internal/failover)
// run it.
//
// The package starts no process and talks to no cluster itself; the
// chaos loop that drives a cluster of localcluster's processes lives in
// its tests.
package chaos

// Package hacluster runs a jobplane HA cluster of real processes on
// loopback, for failover tests and the chaos loop: N members of a real etcd
// cluster (the etcd server of this module's go.mod, each on its own data
// directory), M `jobplane jobmanager` processes on that cluster, and K
// `jobplane taskexecutor` processes, each writing an attempt log.
//
// Start (or New, in a test) builds the binaries once per test binary and
// starts the processes; every Process can be signalled (SIGKILL, SIGTERM,
// SIGSTOP, SIGCONT) and restarted on its own data directory. Leader finds
// the jobmanager that leads; Attempts reads the TaskExecutors' attempt logs
// (ReadAttemptLog reads any one, also of a process started elsewhere) and
// CheckAttempts checks that no subtask ever ran twice at once (under two
// JobMasters or under one). MeasureFailover times failovers.
//
// The timings of the jobmanagers are TimingFlags (the defaults of the
// binary when empty); SessionTTL reports the session TTL in force, so that
// tests bound their waits by it.
//
// By default the TaskExecutors reach the HA store through a `jobplane
// hastore` process of their own on the etcd cluster, so that any
// jobmanager may be killed; Config.TaskExecutorHAStore points them at
// jobmanagers instead, and Config.EmbeddedStore runs everything on one
// etcd member embedded in that hastore process. Config.EtcdProxies puts a
// cuttable proxy between each jobmanager and etcd (JobManager.CutEtcd).
//
// New logs the end of every process's log when its test fails, or always
// when the environment sets HACLUSTER_LOGS.
//
// It is for tests only: it builds with the go command found on PATH, and it
// listens and connects on 127.0.0.1 only.
package hacluster

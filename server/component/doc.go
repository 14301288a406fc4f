// Package component wires each component of a jobplane process once: a
// TaskExecutor on an endpoint of its own, a JobManager on a process's
// endpoint, and the HA store served to other processes. Every entry point
// builds its components here: the jobplane binary's server verbs, package
// standalone, the test clusters of package localcluster, the conformance
// runner's TaskExecutors and the benchmarks'.
//
// It only assembles: each component's behaviour lives in its own package
// (taskexecutor, jobmanager, endpoint, hastorerpc), and what a caller
// varies (timings, interceptors, invokables) comes in through their
// configurations. A component is built by a constructor that opens what it
// needs (its listener) and runs under Run(ctx), which returns once ctx
// ended and everything it started has stopped; a constructor that fails
// leaves nothing open.
package component

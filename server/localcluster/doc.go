// Package localcluster runs whole jobplane clusters for programs, tests
// and tools, in two modes: inside the calling process, or as real child
// processes. It is the one test cluster of the repository.
//
// # In-process mode
//
// Start runs a cluster inside the calling process, as Flink's MiniCluster
// does: an HA store on an etcd member embedded in a directory of its own,
// JobManagers (Dispatcher, ResourceManager, JobMasters) and TaskExecutors
// that run the caller's task functions (worker.Func), talking over
// loopback sockets exactly as separate processes would. Each component is
// built by package component, as the jobplane binary builds it.
//
// Start brings the cluster up and returns once it leads and its
// TaskExecutors have registered; Execute submits a job, waits for its end
// and returns its result; Close stops everything and removes the temporary
// data. New does the same for a test, which it fails if the cluster does
// not start and at whose end it closes the cluster. Several clusters run
// side by side in one process, each on its own ports and directory. The
// cluster is quiet unless Config.Logger is set.
//
// Tests of the server itself shape the cluster further through Config
// (several JobManagers, short timings, limits) and reach into it: the
// store (Cluster.Store, Config.WrapStore with a StoreRecorder), each
// JobManager (Stop) and TaskExecutor (Partition), the task calls at every
// TaskExecutor (Cluster.Tasks), and the JobMasters' clock (FakeClock).
//
// # Multi-process mode
//
// Process runs a child process that can be signalled (SIGKILL, SIGTERM,
// SIGSTOP, SIGCONT), waited for and restarted on its own directory, with a
// log of all its runs; StartProcess runs any command, and StartServer a
// jobplane server verb on a loopback port that it keeps across restarts.
// They take a context and return errors, so that tools (the conformance
// runner, the bench) start their processes with them too.
//
// On top of them, StartProcessCluster (NewProcessCluster in a test) runs an
// HA cluster of real processes: etcd members (the etcd server of this
// module's go.mod), `jobplane jobmanager` processes on them (or on their
// own embedded members), `jobplane taskexecutor` processes that write
// attempt logs, and the TaskExecutors' `jobplane hastore` process, with
// proxies that cut a jobmanager off etcd; it finds the leader, waits for
// the TaskExecutors and collects the processes' logs. StartStandalone
// (NewStandalone) runs a single `jobplane standalone`. Binaries builds the
// programs with the go command on PATH, once per process; Main removes
// them at the end of a test binary.
//
// The package imports no testing: its test helpers take a TB, which
// *testing.T and *testing.B satisfy.
//
// # What it links
//
// The package is in the server's module, not the SDK's, and links the
// whole server and etcd: a program that only talks to a cluster links
// the SDK alone. It is for development, tests, examples and tools; a real
// deployment runs `jobplane standalone` or separate jobmanager and
// taskexecutor processes. It listens and connects on 127.0.0.1 only.
package localcluster

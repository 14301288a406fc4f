// Package localcluster runs a whole jobplane cluster inside a Go program
// or test, as Flink's MiniCluster does: an embedded HA store in a
// directory of its own, JobManagers (Dispatcher, ResourceManager,
// JobMasters) and TaskExecutors that run the caller's task functions, all
// in the calling process and talking over loopback sockets exactly as
// separate processes would. Each component is built by package component,
// as the jobplane binary builds it.
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
// The package is in the server's module and links the whole server and
// etcd: a program that only talks to a cluster links the SDK alone. It is
// for development, tests and examples; a real deployment runs `jobplane
// standalone` or separate jobmanager and taskexecutor processes.
package localcluster

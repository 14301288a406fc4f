// Package localcluster runs a whole jobplane cluster inside a Go program
// or test, as Flink's MiniCluster does: an embedded HA store in a
// directory of its own, the JobManager (Dispatcher, ResourceManager,
// JobMasters) and TaskExecutors that run the caller's task functions, all
// in the calling process and talking over loopback sockets exactly as
// separate processes would.
//
// Start brings the cluster up and returns once it leads and its
// TaskExecutors have registered; Execute submits a job, waits for its end
// and returns its result; Close stops everything and removes the temporary
// data. Several clusters run side by side in one process, each on its own
// ports and directory. The cluster is quiet unless Config.Logger is set.
//
// It is for development, tests and examples; a real deployment runs
// `jobplane standalone` or separate jobmanager and taskexecutor processes.
package localcluster

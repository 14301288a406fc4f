// Package cli is the command-line client of the jobplane binary: the
// client verbs submit, list, status, cancel, wait, logs, cluster,
// checkpoints, savepoint, savepoints and delete-savepoint, and
// what they share: the global flags that say which cluster to reach and
// how (--server, --tls-ca, --token, --token-file, --timeout, --retry,
// -o), the bearer token's sources, the job file's parsing with every
// error placed in the file, the tables, JSON and YAML the verbs print,
// the live display of a job being followed, and the exit codes.
//
// The binary's main assembles the root command, with its server
// subcommands, and calls AddCommands to add the client verbs to it.
//
// The package reaches a cluster only through the Go SDK (sdk and
// sdk/jobgraph) and the generated messages: it must not import the
// server's packages or the server's dependencies (etcd, Prometheus), so
// that the client is no more than a program built on the SDK could be
// (deps_test.go checks it). It must not end the process either: a verb
// that fails returns its exit code with its error, and main exits.
package cli

// Package bench is the harness behind `make bench`: it runs the jobplane
// binary as a separate process, drives it with connect-go clients and with
// TaskExecutors hosted in the harness process, measures each scenario
// beside a floor (the least the same work can cost on the same machine,
// measured in the same run), and reports the figures as a table for the
// terminal and as the Markdown of BENCHMARKS.md.
//
// A scenario owns every process, listener and temporary directory it
// starts and releases them before it returns, also when it fails; every
// wait in it has a deadline. A scenario fails (and `make bench` exits
// non-zero) only when it cannot run at all; a poor figure is reported,
// never treated as an error.
//
// The package measures; it must not change what it measures: it uses the
// server's packages only as a client or a TaskExecutor would, and never
// reaches into a running JobManager.
package bench

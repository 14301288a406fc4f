// Package scheduler turns a JobGraph into a compact execution topology:
// one execution vertex per subtask, edges kept as groups of producers and
// consumers (never one object per edge, so memory grows with vertices, not
// with their product), pipelined regions, the dependencies between
// regions through blocking results, and the set of regions to restart
// when a task fails (region failover).
//
// It is pure computation over the graph: no I/O, no clocks, no RPC. The
// JobMaster uses it to decide what to deploy and what to restart.
package scheduler

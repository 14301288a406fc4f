// Package scheduler turns a JobGraph into a compact ExecutionGraph: one
// execution vertex per subtask with its attempt number and state, edges
// kept as groups of producers and consumers (never one object per edge,
// so memory grows with vertices, not with their product), pipelined
// regions (merged where blocking results would make regions wait for each
// other in a cycle), the release of regions whose blocking inputs are
// complete, and the set of regions to restart when a task fails (its
// region and, transitively, the regions consuming its results).
//
// It is pure computation over the graph: no I/O, no clocks, no RPC. The
// JobMaster uses it to decide what to deploy and what to restart.
package scheduler

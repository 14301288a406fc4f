// Package jobgraph checks submitted JobGraphs against the contract's rules,
// applies parallelism overrides, and computes the digest that recognizes
// an identical resubmission. It is pure: no I/O, no RPC types beyond the
// generated messages.
package jobgraph

// Package jobstatus holds the state machines of a job's status and of an
// execution attempt's state, as pure functions over the contract's enums.
// It owns which transitions are legal and which states are terminal, and
// nothing else: no I/O, no clocks, no goroutines.
package jobstatus

// Package taskexecutor is the TaskExecutor: it offers slots, runs the
// execution attempts that JobMasters deploy into them, and reports every
// state change. It finds the ResourceManager through the HA store,
// registers and heart-beats there, and follows a new leader when one is
// elected.
//
// It enforces the contract's fencing on its side: a call with a
// ResourceManager or JobMaster token older than the newest it has seen is
// refused, and once a job's JobMaster token changes, the attempts deployed
// under the older one are canceled and never reported.
package taskexecutor

// Package batch splits the items of a batch call (TaskExecutorService's
// RequestSlots, SubmitTasks and FreeSlots, JobMasterService's
// UpdateTaskExecutionStates) into calls of bounded size, so that one call
// per pair of processes carries what would otherwise take one call per
// item, while every call stays well under the endpoints' request limit.
// It holds no state and makes no calls.
package batch

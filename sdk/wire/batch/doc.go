// Package batch splits the items of a batch call (TaskExecutorService's
// RequestSlots, SubmitTasks and FreeSlots, JobMasterService's
// UpdateTaskExecutionStates) into calls of bounded size, so that one call
// per pair of processes carries what would otherwise take one call per
// item, while every call stays well under the endpoints' request limit.
// Send makes the calls, falling back to one-item calls for a receiver
// that lacks the batch call; the package makes no calls of its own.
package batch

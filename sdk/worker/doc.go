// Package worker runs your own Go functions as jobplane tasks: a
// TaskExecutor that registers the functions by invokable name, joins a
// cluster and runs the subtasks its JobMasters deploy. Registration,
// heartbeats, slot offers and fencing are the package's business.
package worker

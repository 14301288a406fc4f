// Package sdk is the Go client of a jobplane cluster: submit a JobGraph,
// watch it, wait for its result, cancel it, list jobs, look at a job's
// checkpoints, take, list and delete savepoints, and look at the
// cluster.
//
//	c, err := sdk.New([]string{"http://127.0.0.1:8080"})
//	if err != nil { ... }
//	defer c.Close()
//	res, err := c.Execute(ctx, graph) // submit, then wait for the result
//
// # Leaders and retries
//
// Only the leading JobManager answers the public API; the others answer
// UNAVAILABLE (NOT_LEADER) with the leader's address when they know it.
// A Client is given one or more URLs, finds the leader among them and
// follows it: a NOT_LEADER answer sends the call to the named leader at
// once, and a call that cannot reach a server tries the next URL.
//
// Every call the contract marks idempotent or free of side effects is
// retried, with backoff (RetryPolicy), when the answer is UNAVAILABLE or
// the connection failed or the call's own timeout passed while the
// caller's context is still alive. Submit is among them: the job id is
// chosen before the first attempt (a random one when the caller gives
// none), and the server recognizes a resubmission of the same id and
// plan, so a retry never creates a second job.
//
// TriggerSavepoint is not idempotent (a repeat takes a second savepoint,
// or finds a stopped job ending): it is tried again only where the
// cluster certainly did nothing (NOT_LEADER, a connection that could not
// be made), and an attempt that got no answer returns its error.
//
// An answer that says when to retry (RESOURCE_EXHAUSTED with a
// google.rpc.RetryInfo detail, as a server that limits a client's
// submissions per second sends) is retried after that delay, unless
// retries are off, or the wait would outlast the caller's context or the
// retry policy's MaxElapsed: the error is then returned at once, and
// RetryDelay reads its delay. Other RESOURCE_EXHAUSTED answers (too many
// streams, a cluster at its job or subtask limit) are returned as they
// are.
//
// # Errors
//
// Errors from the cluster are *connect.Error values; the typed errors of
// this package wrap them and carry the details the contract defines:
// NotLeaderError, StaleTokenError, DuplicateJobError, InvalidJobError, and
// for errors.Is ErrJobNotFound, ErrJobTerminal, ErrJobNotTerminal,
// ErrSavepointNotFound, ErrSavepointFailed and ErrCheckpointsUnsupported.
// Reason returns the contract's ErrorReason of any error.
//
// # Dependencies
//
// The client packages (sdk, sdk/jobgraph, sdk/planid, sdk/worker) do not
// link the server's dependencies (etcd, zap): a client-only program stays
// small. server/localcluster, which runs a whole cluster in the program, does.
package sdk

// Package etcdstore is the hastore.Store on etcd: Store (New on an etcd
// client, or Open) keeps elections, execution plans and job results in
// etcd, in an embedded single member (Open with a data directory: the
// default, one-machine deployment), in one of a cluster of embedded
// members, one per JobManager machine (OpenConfig.Member's Peers and
// Join), or in an external cluster, with TLS and authentication (Open
// with endpoints). Package etcdmember runs the embedded members.
//
// The package owns the etcd backend only: its key layout, its fenced
// transactions, its group commit, its sessions (etcd leases) and the
// placement of etcd's leadership in a cluster of embedded members. It
// holds no RPC code, and runs no goroutines beyond what the backend needs
// (lease renewal, watching leader keys, placing etcd's leader). The
// contract it implements is package hastore's; it adds no behaviour
// callers must know of beyond Open's configuration.
//
// # Fencing
//
// A grant's token is {session id, epoch}: the session id is the etcd lease
// (in hex) and the epoch is the create revision of the leader's key, so
// epochs of an election strictly increase, also across restarts. Every
// write is one etcd transaction that compares the writer's leader key's
// create revision with the token's epoch, and that no key of the election
// is older, in the same transaction as the write itself. A leader whose
// lease expired while it was paused is refused however late it wakes up.
//
// # Group commit
//
// Under load, the store sends the writes that queued while its previous
// transaction was in flight as one etcd transaction, each write a nested
// transaction with its own comparisons (fence and conditions) and its own
// answer; a write that finds no transaction in flight goes out at once. A
// job's several writes then no longer divide the store's write rate.
// Batches respect etcd's max-txn-ops and request size limits, and never
// hold two writes to one key, so writes to a key apply in order.
//
// # Key layout
//
// All keys live under a prefix (default DefaultPrefix, "/jobplane/"), so
// several clusters can share one etcd:
//
//	<prefix>elections/<election>/<lease-hex>  a candidacy; value: the published address
//	<prefix>plans/<job-id>                    ExecutionPlan, protobuf binary
//	<prefix>results/<job-id>                  JobResultEntry (result + dirty/clean), protobuf binary
//	<prefix>cancels/<job-id>                  a cancel request; goes with the plan
//	<prefix>checkpoints/<job-id>/last         the greatest checkpoint id the job used (decimal); goes with the plan
//	<prefix>checkpoints/<job-id>/ids/<id>     CompletedCheckpoint, the id in 20 digits; goes with the plan
//	<prefix>savepoints/<savepoint-id>         Savepoint, protobuf binary; outlives its job
//	<prefix>taskexecutors/<id>                a member of the TaskExecutor membership
//
// Elections are "jobmanager" and "job/<job-id>"; the leader of an election
// is its candidacy key with the lowest create revision (etcd's concurrency
// recipe).
package etcdstore

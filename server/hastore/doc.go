// Package hastore is jobplane's high-availability store: leader election
// with fencing tokens, and the durable state a cluster must not lose
// (execution plans and job results).
//
// Store is the interface; Etcd is its backend on etcd: an embedded single
// member (StartMember, or Open with a data directory: the default,
// one-machine deployment), one of a cluster of embedded members, one per
// JobManager machine (MemberConfig.Peers and Join), or an external
// cluster, with TLS and authentication (Open with endpoints).
// Package hastorerpc serves a Store as HAStoreService and implements Store
// over that service; package storetest is the contract suite every backend
// passes.
//
// The package owns storage only: it holds no RPC code, and runs no
// goroutines beyond what its backend needs (lease renewal, watching leader
// keys, and the embedded member's maintenance).
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
// Under load, the Etcd backend sends the writes that queued while its
// previous transaction was in flight as one etcd transaction, each write a
// nested transaction with its own comparisons (fence and conditions) and
// its own answer; a write that finds no transaction in flight goes out at
// once. A job's several writes then no longer divide the store's write
// rate. Batches respect etcd's max-txn-ops and request size limits, and
// never hold two writes to one key, so writes to a key apply in order.
//
// # Key layout
//
// All keys live under a prefix (default "/jobplane/"), so several clusters
// can share one etcd:
//
//	<prefix>elections/<election>/<lease-hex>  a candidacy; value: the published address
//	<prefix>plans/<job-id>                    ExecutionPlan, protobuf binary
//	<prefix>results/<job-id>                  JobResultEntry (result + dirty/clean), protobuf binary
//	<prefix>checkpoints/<job-id>/...          reserved for checkpoint metadata
//
// Elections are "jobmanager" and "job/<job-id>"; the leader of an election
// is its candidacy key with the lowest create revision (etcd's concurrency
// recipe).
//
// # Space
//
// The embedded member runs periodic auto-compaction (default: keep 5
// minutes of history) under a space quota (default 2 GiB). Its maintenance
// loop checks the database every 30 seconds: past half the quota it
// compacts all history; when free pages exceed half the file it
// defragments; and if the quota alarm went off anyway it does both and
// clears the alarm, so job churn never leaves the store read-only. An
// external cluster is its operator's to compact and defragment.
package hastore

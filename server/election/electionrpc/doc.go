// Package electionrpc follows an election's leader over HAStoreService:
// Observer implements election.Observer with the service's ObserveLeader
// stream, reopened whenever it breaks.
//
// It owns only that translation (the wire's LeaderInfo to election.Leader,
// Connect errors to retries), and links no store backend: a program that
// only needs to find a cluster's leader (a TaskExecutor, an SDK worker)
// uses it instead of hastorerpc.Client, which carries the whole Store.
package electionrpc

// Package electionrpc follows an election's leader over HAStoreService:
// Observer implements election.Observer with the service's ObserveLeader
// stream, served by any of a cluster's processes (Config.BaseURLs), and
// moves to the next when one breaks, cannot be reached or stays silent;
// it implements election.Reader too, with one GetLeader call, for a
// single read such as a TaskExecutor's check of a JobMaster token.
// Handler serves ObserveLeader from any election.Observer, so a process
// whose store lives in another process can still be asked for the leader;
// StreamLeader is its stream loop, which hastorerpc's handler shares.
//
// It owns only that translation (the wire's LeaderInfo to and from
// election.Leader, Connect errors to retries), and links no store backend:
// a program that only needs to find a cluster's leader (a TaskExecutor, an
// SDK worker) uses it instead of hastorerpc.Client, which carries the
// whole Store.
package electionrpc

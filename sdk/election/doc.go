// Package election holds the pure types of the HA store's leader
// elections: the fencing Token of a grant, the Leader an election has, the
// names of the elections, and Observer, the one capability a process needs
// to follow an election's leader.
//
// It is a leaf of the SDK module, a contract library that both sides
// import: it imports no store backend (no etcd, no zap) and no RPC code,
// so that programs that only follow a cluster's leader (a TaskExecutor, a
// user's worker built with the SDK) link neither. The server's HA store
// speaks these types (every hastore.Store is an Observer); package
// electionrpc implements Observer over HAStoreService.
package election

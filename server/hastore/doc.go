// Package hastore is the contract of jobplane's high-availability store:
// leader election with fencing tokens, and the durable state a cluster
// must not lose (execution plans and job results).
//
// It declares what every backend implements and every caller may rely
// on: the Store and Session interfaces, Fence, SessionConfig and
// Leadership, the errors (errors.go), the validation of input shared by
// the backends and the RPC layer (validate.go), and Validity, the
// session lease measure both backends use.
//
// Behaviour a backend may have in one write or in steps is part of the
// interface: Store.FinishJob (record a result and clean up) and
// Session.PutExecutionPlanAndLead (put a plan and lead the job). Each
// method says what a backend may do and what its caller may rely on
// either way; a backend without the fused write uses the plain
// implementation here (FinishJobInSteps, PutExecutionPlanNoLead). Callers
// never look for optional behaviour by type assertion, and a Store that
// wraps another to watch or change its writes implements these methods
// itself (it would otherwise get the inner store's, which bypass it).
//
// The backends live in packages of their own, as Temporal's persistence
// layer keeps each store apart from the interfaces it implements:
//
//   - etcdstore: the store on etcd (an embedded member, one of a cluster
//     of embedded members, or an external cluster), with Open;
//   - etcdmember: the embedded etcd member that etcdstore runs on;
//   - hastorerpc: a Store served as HAStoreService, and a Store over that
//     service in another process;
//   - storetest: the contract suite every backend passes.
//
// The package must not import etcd (go.etcd.io) or zap, nor any backend:
// a program that needs only the contract (the Dispatcher, a remote
// store's client) links no storage engine. A test here fails if it does.
//
// # Fencing
//
// A grant's token is {session id, epoch}; the epochs of an election
// strictly increase, also across restarts of the store. A backend
// performs a fenced write only if its token is the election's current
// grant, checked atomically with the write itself, so that a leader whose
// session expired while it was paused is refused however late it wakes
// up.
package hastore

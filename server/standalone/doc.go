// Package standalone runs a whole jobplane cluster in one process: an HA
// store (an embedded etcd member on a data directory, or an external etcd
// cluster), a JobManager (Dispatcher, ResourceManager and JobMasters) that
// also serves the store as HAStoreService on one loopback-or-chosen
// listener, and any number of TaskExecutors, each on a loopback port of its
// own, offering the built-in invokables and the caller's.
//
// It is the one wiring of `jobplane standalone`. The components talk to
// each other through the generated Connect clients over real sockets,
// exactly as separate processes would.
//
// New opens what can fail (listeners, the store); Run serves until its
// context ends, then stops every component and closes the store. The
// package holds no global state: several clusters run side by side in one
// process, each on its own ports and data directory.
package standalone

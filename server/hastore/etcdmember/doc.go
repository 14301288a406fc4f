// Package etcdmember runs an embedded etcd member
// (go.etcd.io/etcd/server/v3/embed) on a data directory: a single member
// on its own (Start with a Config: the default deployment), or one member
// of a cluster of embedded members, one per JobManager machine, that
// bootstraps from its Peers or joins a running cluster (Config.Join). It
// also says how to reach etcd members as a client (ClientConfig,
// NewClient: TLS, client certificates, etcd's users), for the store on an
// external cluster and for the member administration commands.
//
// The package owns the member's life: its start and readiness, its
// exclusive lock on the data directory (LockFileName), its peers and
// joining, its peer TLS, its space maintenance, and the translation of
// etcd's zap logs into slog. It must not know of elections, plans or
// results: package etcdstore builds the store on a member, and imports
// this package, never the other way round.
//
// Its error texts begin with "hastore:", as they did before the member
// had a package of its own; operators and scripts match them.
//
// # Space
//
// The member runs periodic auto-compaction (default: keep 5 minutes of
// history) under a space quota (default 2 GiB). Its maintenance loop
// checks the database every 30 seconds: past half the quota it compacts
// all history; when free pages exceed half the file it defragments; and
// if the quota alarm went off anyway it does both and clears the alarm,
// so job churn never leaves the store read-only. An external cluster is
// its operator's to compact and defragment.
package etcdmember

// Package failover holds the tests of a jobplane HA cluster of real
// processes on loopback (localcluster.ProcessCluster): a leader killed,
// terminated, paused or cut off from etcd, etcd members dying, a cluster
// left alone on the default timings (TestSteadyLeadership), the README's
// operations run as written (TestReadmeOperations), and the timing of
// failovers (TestMeasureFailover, BenchmarkFailover for `make bench`)
// and of a takeover at scale (BenchmarkRecoveryAtScale).
//
// It is a test-only package: its helpers (SIGKILL-and-SIGTERM cycles,
// job states, the store's watch and candidacies) live in its _test files,
// and its checks of the TaskExecutors' attempt logs in package chaos.
package failover

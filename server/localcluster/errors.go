package localcluster

import "errors"

// Errors of the multi-process mode.
var (
	// ErrExited is returned by Process.Poll, and so by the readiness
	// waits of the package's processes, when the run exits before it is
	// ready.
	ErrExited = errors.New("localcluster: exited before it was ready")
	// ErrNoLeader is returned by ProcessCluster.Leader when no running
	// jobmanager answers as the leader.
	ErrNoLeader = errors.New("localcluster: no jobmanager leads")
	// ErrTwoLeaders is returned by ProcessCluster.Leader when more than
	// one jobmanager answers as the leader.
	ErrTwoLeaders = errors.New("localcluster: two jobmanagers answer as the leader")
	// ErrNoProxies is returned by JobManagerProcess.CutEtcd and HealEtcd
	// of a cluster started without ProcessClusterConfig.EtcdProxies.
	ErrNoProxies = errors.New("localcluster: the jobmanager reaches etcd directly (ProcessClusterConfig.EtcdProxies is off)")
	// ErrNoEtcd is returned by ProcessCluster.EtcdClient with
	// ProcessClusterConfig.EmbeddedStore: no etcd cluster runs.
	ErrNoEtcd = errors.New("localcluster: no etcd cluster (ProcessClusterConfig.EmbeddedStore)")
	// ErrNoPeers is returned by ProcessCluster.EtcdLeader without
	// ProcessClusterConfig.EmbeddedPeers: the jobmanagers embed no
	// members.
	ErrNoPeers = errors.New("localcluster: the jobmanagers embed no members (ProcessClusterConfig.EmbeddedPeers)")
)

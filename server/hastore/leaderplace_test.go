package hastore_test

import (
	"context"
	"testing"
	"time"

	"github.com/jobplane/jobplane/server/hastore"
)

// etcdLeader returns the node whose member leads etcd, as the members
// report it.
func etcdLeader(t *testing.T, nodes []*node) *node {
	t.Helper()
	c := etcdClient(t, nodes[0].endpoint())
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		for _, n := range nodes {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			st, err := c.Status(ctx, n.endpoint())
			cancel()
			if err == nil && st.Leader != 0 && st.Leader == st.Header.GetMemberId() {
				return n
			}
		}
	}
	t.Fatal("no etcd leader after 30s")
	return nil
}

// The process that leads the election "jobmanager" moves etcd's
// leadership off its own member, so that its death does not cost an etcd
// election on top of its lease; a process that leads only other
// elections leaves etcd's leader where it is.
func TestJobManagerLeaderMovesEtcdLeaderAway(t *testing.T) {
	nodes := newNodes(t, nil, "a", "b", "c")
	startCluster(t, nodes...)
	lead := etcdLeader(t, nodes)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sess, err := lead.store.OpenSession(ctx, hastore.SessionConfig{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close(context.Background())

	// A per-job election changes nothing.
	if _, err := sess.Campaign(ctx, "job/j1", "http://"+lead.name); err != nil {
		t.Fatal(err)
	}
	if got := etcdLeader(t, nodes); got != lead {
		t.Fatalf("etcd's leader moved from %s to %s for a per-job leadership", lead.name, got.name)
	}

	if _, err := sess.Campaign(ctx, hastore.ElectionJobManager, "http://"+lead.name); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); etcdLeader(t, nodes) == lead; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("etcd's leader is still %s, the JobManager leader's member, after 30s", lead.name)
		}
	}
}

package etcdstore_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobplane/jobplane/sdk/election"
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

	if _, err := sess.Campaign(ctx, election.JobManager, "http://"+lead.name); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); etcdLeader(t, nodes) == lead; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("etcd's leader is still %s, the JobManager leader's member, after 30s", lead.name)
		}
	}
}

// The writes of the process whose member leads etcd succeed while the
// placement moves etcd's leadership away: etcd drops the proposals made
// during a transfer, and the store sends them again. Each round gives
// the leadership back to the process's member while its writes pause
// (a transfer drops other members' proposals too, which is etcd's own
// affair), resumes them, and then grants the process the JobManager
// leadership, which starts the placement's transfer.
func TestWritesSurviveEtcdLeaderTransfers(t *testing.T) {
	nodes := newNodes(t, nil, "a", "b", "c")
	startCluster(t, nodes...)
	lead := etcdLeader(t, nodes)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sess, err := lead.store.OpenSession(ctx, hastore.SessionConfig{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close(context.Background())
	// The writes (the leader's address in another election, rewritten)
	// are fenced by that election's leadership, which the rounds keep.
	w, err := sess.Campaign(ctx, "job/writer", "http://"+lead.name)
	if err != nil {
		t.Fatal(err)
	}
	leadID := memberID(t, etcdClient(t, lead.endpoint()), lead.name)

	var (
		paused sync.RWMutex // held by the test while the writes pause
		writes atomic.Int64
		stop   = make(chan struct{})
		done   = make(chan error, 1)
	)
	go func() {
		for n := 0; ; n++ {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			paused.RLock()
			err := lead.store.ConfirmLeadership(ctx, w.Fence(), fmt.Sprintf("http://%s/%d", lead.name, n))
			paused.RUnlock()
			if err != nil {
				done <- fmt.Errorf("write %d: %w", n, err)
				return
			}
			writes.Add(1)
		}
	}()
	waitWrites := func(more int64) {
		t.Helper()
		for target, deadline := writes.Load()+more, time.Now().Add(30*time.Second); writes.Load() < target; time.Sleep(5 * time.Millisecond) {
			select {
			case err := <-done:
				t.Fatal(err)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("fewer than %d writes in 30s", more)
			}
		}
	}

	const rounds = 4
	for i := 0; i < rounds; i++ {
		if current := etcdLeader(t, nodes); current != lead {
			paused.Lock()
			for deadline := time.Now().Add(30 * time.Second); etcdLeader(t, nodes) != lead; time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("round %d: etcd's leadership did not come back to %s in 30s", i, lead.name)
				}
				mctx, mcancel := context.WithTimeout(ctx, 2*time.Second)
				_, _ = etcdClient(t, etcdLeader(t, nodes).endpoint()).MoveLeader(mctx, leadID)
				mcancel()
			}
			paused.Unlock()
		}
		waitWrites(20)
		l, err := sess.Campaign(ctx, election.JobManager, "http://"+lead.name)
		if err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(30 * time.Second); etcdLeader(t, nodes) == lead; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: etcd's leader is still the JobManager leader's member after 30s", i)
			}
		}
		waitWrites(20)
		if err := l.Resign(ctx); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	t.Logf("%d writes across %d transfers", writes.Load(), rounds)
}

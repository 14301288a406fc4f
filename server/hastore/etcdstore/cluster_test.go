package etcdstore_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/hastore/etcdmember"
	"github.com/jobplane/jobplane/server/hastore/etcdstore"
	"github.com/jobplane/jobplane/server/localcluster/freeport"
)

// freeAddr returns a loopback host:port that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	addr, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// node is one jobplane process's embedded member of a test cluster, with
// the store it opened on it.
type node struct {
	name       string
	dir        string
	clientAddr string // the member's client listener
	peerAddr   string // the member's peer listener
	peerURL    string // the peer URL the cluster knows it by (a proxy's, in partition tests)
	peerTLS    etcdmember.PeerTLS
	store      *etcdstore.Store
}

func (n *node) endpoint() string { return "http://" + n.clientAddr }

// newNodes returns nodes named names, each on its own directory and
// ports, their peer URLs their listeners' unless proxy gives others.
func newNodes(t *testing.T, proxy func(n *node) string, names ...string) []*node {
	t.Helper()
	nodes := make([]*node, len(names))
	for i, name := range names {
		n := &node{name: name, dir: filepath.Join(t.TempDir(), name), clientAddr: freeAddr(t), peerAddr: freeAddr(t)}
		n.peerURL = "http://" + n.peerAddr
		if proxy != nil {
			n.peerURL = proxy(n)
		}
		nodes[i] = n
	}
	return nodes
}

func peersOf(nodes ...*node) []etcdmember.Peer {
	var peers []etcdmember.Peer
	for _, n := range nodes {
		peers = append(peers, etcdmember.Peer{Name: n.name, URL: n.peerURL})
	}
	return peers
}

// openConfig is the store configuration of n as a jobmanager would have
// it: its member on its data directory, in the cluster of peers, joining
// through join if set.
func (n *node) openConfig(peers []etcdmember.Peer, join ...string) etcdstore.OpenConfig {
	return etcdstore.OpenConfig{
		DataDir: n.dir,
		Logger:  quietLogger(),
		Member: etcdmember.Config{
			Name: n.name, ClientAddr: n.clientAddr, PeerAddr: n.peerAddr,
			Peers: peers, Join: join, PeerTLS: n.peerTLS,
		},
	}
}

// open opens n's store; the test's end closes it.
func (n *node) open(t *testing.T, cfg etcdstore.OpenConfig) {
	t.Helper()
	s, err := n.tryOpen(cfg)
	if err != nil {
		t.Fatalf("open %s: %v", n.name, err)
	}
	n.store = s
}

func (n *node) tryOpen(cfg etcdstore.OpenConfig) (*etcdstore.Store, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return etcdstore.Open(ctx, cfg)
}

// close closes n's store and with it its member, as a stopped process.
func (n *node) close(t *testing.T) {
	t.Helper()
	if n.store != nil {
		if err := n.store.Close(); err != nil {
			t.Errorf("close %s: %v", n.name, err)
		}
		n.store = nil
	}
}

// startCluster starts nodes as one new cluster, all at once (a member of
// a new cluster is ready only once a majority runs).
func startCluster(t *testing.T, nodes ...*node) {
	t.Helper()
	peers := peersOf(nodes...)
	var wg sync.WaitGroup
	errs := make([]error, len(nodes))
	for i, n := range nodes {
		wg.Go(func() { n.store, errs[i] = n.tryOpen(n.openConfig(peers)) })
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, n := range nodes {
			n.close(t)
		}
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("start cluster: %v", err)
	}
}

// etcdClient returns a client of the members at endpoints, closed with
// the test.
func etcdClient(t *testing.T, endpoints ...string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: nopZap()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// memberNames lists the cluster's members by name, sorted ("" for one
// added but not started).
func memberNames(t *testing.T, c *clientv3.Client) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.MemberList(ctx)
	if err != nil {
		t.Fatalf("MemberList: %v", err)
	}
	var names []string
	for _, m := range resp.Members {
		names = append(names, m.Name)
	}
	sort.Strings(names)
	return names
}

// untilAvailable calls try until it returns anything but
// hastore.ErrUnavailable (a proposal or read not done in etcd's request
// timeout, as on a loaded machine), 100ms apart, as a jobmanager would try
// again, and returns what it returned last, or its last error once ctx
// ends.
func untilAvailable(t *testing.T, ctx context.Context, try func() error) error {
	t.Helper()
	for {
		err := try()
		if !errors.Is(err, hastore.ErrUnavailable) {
			return err
		}
		t.Logf("%v; trying again", err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// leadAndPut leads the election "jobmanager" through s, puts the plan of
// job id fenced by the grant, and ends its session; each try in a
// session of its own, until the store is available (30s at most).
func leadAndPut(t *testing.T, s hastore.Store, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := untilAvailable(t, ctx, func() error {
		sess, err := s.OpenSession(ctx, hastore.SessionConfig{TTL: 10 * time.Second})
		if err != nil {
			return fmt.Errorf("OpenSession: %w", err)
		}
		defer sess.Close(ctx)
		l, err := sess.Campaign(ctx, election.JobManager, "http://"+id)
		if err != nil {
			return fmt.Errorf("Campaign: %w", err)
		}
		plan := &hastorev1.ExecutionPlan{JobId: id, JobGraph: &jobplanev1.JobGraph{Name: id}}
		if err := s.PutExecutionPlan(ctx, l.Fence(), plan); err != nil {
			return fmt.Errorf("PutExecutionPlan %s: %w", id, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// hasPlans checks that s reads the plans of every job in ids, until the
// store is available (30s at most).
func hasPlans(t *testing.T, s hastore.Store, via string, ids ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, id := range ids {
		var got *hastorev1.ExecutionPlan
		err := untilAvailable(t, ctx, func() (err error) {
			got, err = s.GetExecutionPlan(ctx, id)
			return err
		})
		if err != nil || got.GetJobGraph().GetName() != id {
			t.Errorf("plan %s through %s = %v, %v; want it", id, via, got, err)
		}
	}
}

// Three embedded members form one cluster; the store works through any
// of them; a member restarted on its data rejoins with it; a fourth
// member joins the running cluster; a dead member is removed and a fresh
// one on an empty directory replaces it.
func TestEmbeddedCluster(t *testing.T) {
	nodes := newNodes(t, nil, "a", "b", "c")
	a, b, c := nodes[0], nodes[1], nodes[2]
	startCluster(t, nodes...)
	admin := etcdClient(t, a.endpoint())
	if got := memberNames(t, admin); strings.Join(got, ",") != "a,b,c" {
		t.Fatalf("members = %v, want a, b, c", got)
	}

	t.Log("the store works through every member")
	for _, n := range nodes {
		leadAndPut(t, n.store, "via-"+n.name)
	}
	for _, n := range nodes {
		hasPlans(t, n.store, n.name, "via-a", "via-b", "via-c")
	}

	t.Log("a member restarted on its data rejoins and has what was written meanwhile")
	c.close(t)
	leadAndPut(t, a.store, "while-c-down")
	// A restart ignores how a new member would join.
	c.open(t, c.openConfig(peersOf(nodes...), b.endpoint()))
	hasPlans(t, c.store, "restarted c", "via-c", "while-c-down")
	if got := memberNames(t, admin); strings.Join(got, ",") != "a,b,c" {
		t.Errorf("members after the restart = %v, want a, b, c", got)
	}

	t.Log("a fourth member joins through a running member")
	d := newNodes(t, nil, "d")[0]
	d.open(t, d.openConfig(peersOf(d), a.endpoint(), b.endpoint()))
	t.Cleanup(func() { d.close(t) })
	hasPlans(t, d.store, "d", "via-a", "while-c-down")
	leadAndPut(t, d.store, "via-d")
	hasPlans(t, b.store, "b", "via-d")
	if got := memberNames(t, admin); strings.Join(got, ",") != "a,b,c,d" {
		t.Errorf("members after the join = %v, want a, b, c, d", got)
	}

	t.Log("a dead member is removed and replaced by a fresh one on an empty directory")
	oldID := memberID(t, admin, "c")
	c.close(t)
	fresh := &node{name: "c", dir: filepath.Join(t.TempDir(), "c-fresh"), clientAddr: freeAddr(t), peerAddr: c.peerAddr, peerURL: c.peerURL}
	_, err := fresh.tryOpen(fresh.openConfig(peersOf(fresh), a.endpoint()))
	if err == nil || !strings.Contains(err.Error(), "remove it first") {
		t.Fatalf("replacement joining before the dead member's removal: %v, want an error saying to remove it first", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := admin.MemberRemove(ctx, oldID); err != nil {
		t.Fatalf("MemberRemove: %v", err)
	}
	fresh.open(t, fresh.openConfig(peersOf(fresh), a.endpoint()))
	t.Cleanup(func() { fresh.close(t) })
	hasPlans(t, fresh.store, "replacement c", "via-a", "via-b", "via-c", "while-c-down", "via-d")
	if got := memberNames(t, admin); strings.Join(got, ",") != "a,b,c,d" {
		t.Errorf("members after the replacement = %v, want a, b, c, d", got)
	}
	if id := memberID(t, admin, "c"); id == oldID {
		t.Errorf("replacement has the dead member's ID %x", id)
	}
}

// memberID returns the ID of the member named name.
func memberID(t *testing.T, c *clientv3.Client, name string) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.MemberList(ctx)
	if err != nil {
		t.Fatalf("MemberList: %v", err)
	}
	for _, m := range resp.Members {
		if m.Name == name {
			return m.ID
		}
	}
	t.Fatalf("no member %q", name)
	return 0
}

// nopZap drops an etcd client's logs.
func nopZap() *zap.Logger { return zap.NewNop() }

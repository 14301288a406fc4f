package etcdstore_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/server/hastore"
)

// peerNet carries the peer traffic of a test cluster through one HTTP
// proxy per member, so that a test can cut a member off from the others
// while its process (here: its goroutines) runs on.
//
// A member's peer URL is its proxy's; the proxy forwards to the member's
// peer listener. Raft's requests name their sender (the X-Server-From
// header, a member ID): while a member is cut off, its proxy refuses every
// request, the others refuse those from it, and, since the member's other
// peer requests (lease renewals forwarded to the leader, probes) do not
// name their sender, those are refused everywhere.
type peerNet struct {
	mu     sync.Mutex
	cut    map[string]bool   // names of members cut off
	names  map[string]string // member ID (hex) → name
	active map[*proxied]bool
}

// proxied is a request in flight through the proxies.
type proxied struct {
	from, to string // member names; from is "" when not named
	cancel   context.CancelFunc
}

func newPeerNet() *peerNet {
	return &peerNet{cut: map[string]bool{}, names: map[string]string{}, active: map[*proxied]bool{}}
}

// proxy starts the proxy of n's peer listener and returns its URL.
func (pn *peerNet) proxy(t *testing.T, n *node) string {
	t.Helper()
	backend := &url.URL{Scheme: "http", Host: n.peerAddr}
	tr := &http.Transport{}
	rp := &httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(backend) },
		Transport:     tr,
		FlushInterval: -1, // raft's streams are long responses
		ErrorLog:      log.New(io.Discard, "", 0),
		ErrorHandler:  func(w http.ResponseWriter, _ *http.Request, _ error) { w.WriteHeader(http.StatusBadGateway) },
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		p := &proxied{to: n.name, cancel: cancel}
		if !pn.enter(p, r.Header.Get("X-Server-From")) {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		defer pn.leave(p)
		rp.ServeHTTP(w, r.WithContext(ctx))
	}), ErrorLog: log.New(io.Discard, "", 0)}
	go srv.Serve(l)
	t.Cleanup(func() {
		srv.Close()
		tr.CloseIdleConnections()
	})
	return "http://" + l.Addr().String()
}

// name records the name of the member with ID id.
func (pn *peerNet) name(id uint64, name string) {
	pn.mu.Lock()
	defer pn.mu.Unlock()
	pn.names[fmt.Sprintf("%x", id)] = name
}

// enter admits request p, from the member with ID fromID, unless a cut
// refuses it.
func (pn *peerNet) enter(p *proxied, fromID string) bool {
	pn.mu.Lock()
	defer pn.mu.Unlock()
	p.from = pn.names[fromID]
	if pn.cut[p.to] || pn.cut[p.from] || (p.from == "" && len(pn.cut) > 0) {
		return false
	}
	pn.active[p] = true
	return true
}

func (pn *peerNet) leave(p *proxied) {
	pn.mu.Lock()
	defer pn.mu.Unlock()
	delete(pn.active, p)
}

// isolate cuts the member named name off from the others: requests in
// flight to or from it end, new ones are refused.
func (pn *peerNet) isolate(name string) {
	pn.mu.Lock()
	defer pn.mu.Unlock()
	pn.cut[name] = true
	for p := range pn.active {
		if p.to == name || p.from == name || p.from == "" {
			p.cancel()
		}
	}
}

// heal lets every member reach every other again.
func (pn *peerNet) heal() {
	pn.mu.Lock()
	defer pn.mu.Unlock()
	clear(pn.cut)
}

// A member cut off from its cluster's majority fails its lease renewals:
// the session opened through it ends within its TTL, the leadership with
// it, and a leader observation through it ends with an error rather than
// going silent. Once the network heals, the member serves again.
func TestEmbeddedMemberCutOffEndsSession(t *testing.T) {
	pn := newPeerNet()
	nodes := newNodes(t, func(n *node) string { return pn.proxy(t, n) }, "a", "b", "c")
	a, c := nodes[0], nodes[2]
	startCluster(t, nodes...)
	admin := etcdClient(t, a.endpoint())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	members, err := admin.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range members.Members {
		pn.name(m.ID, m.Name)
	}
	// The cut-off member is a follower, as most members are; a leader cut
	// off steps down first (etcd's check quorum), which the follower's
	// case covers from there on.
	cClient := etcdClient(t, c.endpoint())
	if st, err := cClient.Status(ctx, c.endpoint()); err != nil {
		t.Fatal(err)
	} else if st.Leader == st.Header.MemberId {
		if _, err := cClient.MoveLeader(ctx, memberID(t, admin, "a")); err != nil {
			t.Fatalf("MoveLeader: %v", err)
		}
	}

	const ttl = 3 * time.Second
	sess, err := c.store.OpenSession(ctx, hastore.SessionConfig{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	l, err := sess.Campaign(ctx, election.JobManager, "http://c")
	if err != nil {
		t.Fatal(err)
	}
	observed := make(chan error, 1)
	go func() {
		observed <- c.store.ObserveLeader(ctx, election.JobManager, func(election.Leader) error { return nil })
	}()
	// The session renews through the cluster: it outlives its TTL.
	select {
	case <-sess.Done():
		t.Fatal("session ended before the cut")
	case <-time.After(ttl + time.Second):
	}

	cut := time.Now()
	pn.isolate("c")
	// No renewal succeeds after the cut, so the session's validity, which
	// its leaders check before they act, never reaches past the cut plus
	// the TTL; and the session ends (Done) once it lapses. The timer that
	// ends it may fire late on a loaded machine: Done gets a second more.
	limit := cut.Add(ttl)
	ticker := time.NewTicker(10 * time.Millisecond)
	defer ticker.Stop()
	for ended := false; !ended; {
		if v := sess.ValidUntil(); v.After(limit) {
			t.Fatalf("session valid until %v after the cut, past its TTL %v", v.Sub(cut), ttl)
		}
		select {
		case <-sess.Done():
			ended = true
			took := time.Since(cut)
			t.Logf("session ended %v after the cut", took)
			if took > ttl+time.Second {
				t.Errorf("session ended %v after the cut, want within its TTL %v (and a second for a late timer)", took, ttl)
			}
		case <-ticker.C:
			if time.Since(cut) > ttl+10*time.Second {
				t.Fatalf("session still open %v after the cut (TTL %v)", time.Since(cut), ttl)
			}
		}
	}
	if l.Valid() {
		t.Error("leadership valid after its session ended")
	}
	select {
	case <-l.Done():
	case <-time.After(time.Second):
		t.Error("leadership outlived its session")
	}
	select {
	case err := <-observed:
		if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("ObserveLeader through the cut-off member: %v, want an unavailable error", err)
		}
		t.Logf("ObserveLeader ended %v after the cut: %v", time.Since(cut), err)
	case <-time.After(30 * time.Second):
		t.Error("ObserveLeader through the cut-off member still silent 30s after the cut")
	}

	// The majority goes on, and the member catches up once healed.
	leadAndPut(t, a.store, "during-cut")
	pn.heal()
	for deadline := time.Now().Add(30 * time.Second); ; {
		gctx, gcancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := c.store.GetExecutionPlan(gctx, "during-cut")
		gcancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cut-off member does not serve 30s after healing: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

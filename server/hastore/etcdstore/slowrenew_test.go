package etcdstore_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/hastore/etcdmember"
	"github.com/jobplane/jobplane/server/hastore/etcdstore"
	"github.com/jobplane/jobplane/server/localcluster/freeport"
)

// slowLink forwards TCP connections to backend, holding every chunk of
// bytes for delay in each direction: a link whose round trip is 2×delay
// however little it carries.
type slowLink struct {
	l       net.Listener
	backend string
	delay   time.Duration
	mu      sync.Mutex
	conns   []net.Conn
	wg      sync.WaitGroup
}

func startSlowLink(t *testing.T, backend string, delay time.Duration) *slowLink {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &slowLink{l: l, backend: backend, delay: delay}
	s.wg.Add(1)
	go s.accept()
	t.Cleanup(s.close)
	return s
}

func (s *slowLink) accept() {
	defer s.wg.Done()
	for {
		in, err := s.l.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", s.backend)
		if err != nil {
			in.Close()
			continue
		}
		s.mu.Lock()
		s.conns = append(s.conns, in, out)
		s.mu.Unlock()
		s.wg.Add(2)
		go s.pipe(in, out)
		go s.pipe(out, in)
	}
}

// pipe copies from to to, each chunk delay after it was read.
func (s *slowLink) pipe(from, to net.Conn) {
	defer s.wg.Done()
	type chunk struct {
		data []byte
		at   time.Time
	}
	chunks := make(chan chunk, 1024)
	go func() {
		defer close(chunks)
		for {
			buf := make([]byte, 32<<10)
			n, err := from.Read(buf)
			if n > 0 {
				chunks <- chunk{buf[:n], time.Now().Add(s.delay)}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range chunks {
		time.Sleep(time.Until(c.at)) // the link's latency, not a wait for an event
		if _, err := to.Write(c.data); err != nil {
			break
		}
	}
	to.Close()
	from.Close()
}

func (s *slowLink) close() {
	s.l.Close()
	s.mu.Lock()
	for _, c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// A session whose renewals take longer than the interval between them
// (a sixth of the TTL), but well within the TTL, holds: each renewal is
// waited for until the session would lapse, and the next leaves on time
// beside it. Here the round trip to etcd is 600 ms and the interval
// 333 ms; the session must stay valid past several TTLs.
func TestSlowRenewalsKeepTheSession(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	addr, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	member, err := etcdstore.Open(ctx, etcdstore.OpenConfig{DataDir: t.TempDir(), Member: etcdmember.Config{ClientAddr: addr}, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer member.Close()
	link := startSlowLink(t, addr, 300*time.Millisecond)
	store, err := etcdstore.Open(ctx, etcdstore.OpenConfig{Endpoints: []string{"http://" + link.l.Addr().String()}, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	sess, err := store.OpenSession(ctx, hastore.SessionConfig{TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close(context.Background())

	// Valid 1.8 s past a renewal's send time: valid past this instant
	// means renewals kept coming back for three TTLs.
	target := time.Now().Add(6 * time.Second)
	for !sess.ValidUntil().After(target) {
		select {
		case <-sess.Done():
			t.Fatal("the session ended with renewals taking 600 ms of a 2 s TTL")
		case <-ctx.Done():
			t.Fatal("the session's validity did not reach 6 s from the start")
		case <-time.After(50 * time.Millisecond):
		}
	}
}

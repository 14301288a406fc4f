package hastorerpc_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/sdk/wire/transport"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/hastore/etcdstore"
	"github.com/jobplane/jobplane/server/hastore/hastorerpc"
	"github.com/jobplane/jobplane/server/hastore/storetest"
)

func quietLogger() *slog.Logger {
	if os.Getenv("JOBPLANE_TEST_LOGS") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// server is an HA store process: an embedded member behind an
// HAStoreService on a loopback port, restartable on the same data and
// address.
type server struct {
	dir   string
	addr  string
	store *etcdstore.Store
	http  *http.Server
	done  chan struct{}
}

func startServer(t *testing.T) *server {
	t.Helper()
	s := &server{dir: t.TempDir(), addr: "127.0.0.1:0"}
	s.start(t)
	t.Cleanup(func() { s.stop() })
	return s
}

func (s *server) start(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store, err := etcdstore.Open(ctx, etcdstore.OpenConfig{DataDir: s.dir, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	var ln net.Listener
	for deadline := time.Now().Add(10 * time.Second); ; {
		// The port of a stopped server may take a moment to come free.
		if ln, err = net.Listen("tcp", s.addr); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		store.Close()
		t.Fatal(err)
	}
	s.addr = ln.Addr().String()
	mux := http.NewServeMux()
	mux.Handle(hastorerpc.NewHandler(hastorerpc.HandlerConfig{Store: store, Logger: quietLogger(), Heartbeat: time.Second}).Path())
	s.store = store
	s.http = &http.Server{Handler: mux, Protocols: transport.ServerProtocols()}
	s.done = make(chan struct{})
	go func() {
		defer close(s.done)
		s.http.Serve(ln)
	}()
}

func (s *server) stop() {
	if s.http == nil {
		return
	}
	s.http.Close()
	<-s.done
	s.store.Close()
	s.http = nil
}

func (s *server) url() string { return "http://" + s.addr }

type protocol int

const (
	http1 protocol = iota
	h2c
)

func newHTTPClient(t testing.TB, tr protocol) *http.Client {
	rt := &http.Transport{}
	if tr == h2c {
		var p http.Protocols
		p.SetUnencryptedHTTP2(true)
		rt.Protocols = &p
	}
	t.Cleanup(rt.CloseIdleConnections)
	return &http.Client{Transport: rt}
}

func TestRemoteContract(t *testing.T) {
	for name, tr := range map[string]protocol{"http1.1": http1, "h2c": h2c} {
		t.Run(name, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) *storetest.Backend {
				srv := startServer(t)
				return &storetest.Backend{
					Open: func(storetest.T) hastore.Store {
						return hastorerpc.NewClient(hastorerpc.ClientConfig{HTTPClient: newHTTPClient(t, tr), BaseURL: srv.url(), Logger: quietLogger()})
					},
					Restart: func(storetest.T) {
						srv.stop()
						srv.start(t)
					},
					MaxPlanBytes: hastore.DefaultMaxPlanBytes,
				}
			})
		})
	}
}

// cuttable fails every request once cut, as if its process had vanished.
type cuttable struct {
	next http.RoundTripper
	cut  atomic.Bool
}

func (c *cuttable) RoundTrip(r *http.Request) (*http.Response, error) {
	if c.cut.Load() {
		return nil, errors.New("cut off")
	}
	return c.next.RoundTrip(r)
}

// A client that disappears loses its leadership once its session's TTL
// has passed without renewal, and another candidate takes over.
func TestVanishedClientLosesLeadershipAfterTTL(t *testing.T) {
	srv := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	link := &cuttable{next: newHTTPClient(t, h2c).Transport}
	gone := hastorerpc.NewClient(hastorerpc.ClientConfig{HTTPClient: &http.Client{Transport: link}, BaseURL: srv.url(), Logger: quietLogger()})
	sess, err := gone.OpenSession(ctx, hastore.SessionConfig{TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	old, err := sess.Campaign(ctx, election.JobManager, "gone")
	if err != nil {
		t.Fatal(err)
	}
	// Renewals keep the session well past its TTL while the client lives.
	observer := hastorerpc.NewClient(hastorerpc.ClientConfig{HTTPClient: newHTTPClient(t, http1), BaseURL: srv.url(), Logger: quietLogger()})
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		info, err := observer.Leader(ctx, election.JobManager)
		if err != nil || info.Token != old.Token() {
			t.Fatalf("leader while the client lives = %+v, %v; want %v", info, err, old.Token())
		}
		time.Sleep(100 * time.Millisecond)
	}

	link.cut.Store(true)
	cut := time.Now()
	osess, err := observer.OpenSession(ctx, hastore.SessionConfig{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer osess.Close(context.Background())
	next, err := osess.Campaign(ctx, election.JobManager, "next")
	if err != nil {
		t.Fatalf("takeover: %v", err)
	}
	t.Logf("took over %v after the client vanished (TTL 2s)", time.Since(cut))
	if next.Token().Epoch <= old.Token().Epoch {
		t.Errorf("epoch %d after takeover, want > %d", next.Token().Epoch, old.Token().Epoch)
	}
	// The vanished client finds out by itself once its renewals have failed
	// for a whole TTL.
	select {
	case <-old.Done():
	case <-time.After(10 * time.Second):
		t.Error("the vanished client still believes it leads")
	}
}

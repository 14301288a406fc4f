package hastorerpc_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/sdk/election/electionrpc"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/hastore/etcdstore"
	"github.com/jobplane/jobplane/server/hastore/hastorerpc"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// service is a real HA store (an embedded etcd member) served as
// HAStoreService on a loopback port; its HTTP server can be stopped and
// started again on the same address while the store stays up.
type service struct {
	store *etcdstore.Store
	addr  string
	http  *http.Server
	done  chan struct{}
}

func startService(t testing.TB) *service {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store, err := etcdstore.Open(ctx, etcdstore.OpenConfig{DataDir: t.TempDir(), Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return serveStore(t, store)
}

// serveStore serves store as HAStoreService on a loopback port of its own
// until the test ends (before the store closes).
func serveStore(t testing.TB, store *etcdstore.Store) *service {
	t.Helper()
	s := &service{store: store, addr: "127.0.0.1:0"}
	t.Cleanup(s.stop)
	s.start(t)
	return s
}

func (s *service) start(t testing.TB) {
	t.Helper()
	var (
		ln  net.Listener
		err error
	)
	for deadline := time.Now().Add(10 * time.Second); ; {
		// The port of a stopped server may take a moment to come free.
		if ln, err = net.Listen("tcp", s.addr); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	s.addr = ln.Addr().String()
	mux := http.NewServeMux()
	mux.Handle(hastorerpc.NewHandler(hastorerpc.HandlerConfig{Store: s.store, Logger: quiet()}).Path())
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	s.http = &http.Server{Handler: mux, Protocols: &p}
	s.done = make(chan struct{})
	go func() {
		defer close(s.done)
		s.http.Serve(ln)
	}()
}

func (s *service) stop() {
	if s.http == nil {
		return
	}
	s.http.Close()
	<-s.done
	s.http = nil
}

func newObserver(t testing.TB, baseURL string, h2c bool) *electionrpc.Observer {
	t.Helper()
	return newObserverConfig(t, electionrpc.Config{BaseURL: baseURL}, h2c)
}

// newObserverConfig returns an Observer of cfg, over a client of its own
// (h2c or HTTP/1.1) whose idle connections close when the test ends.
func newObserverConfig(t testing.TB, cfg electionrpc.Config, h2c bool) *electionrpc.Observer {
	t.Helper()
	tr := &http.Transport{}
	if h2c {
		var p http.Protocols
		p.SetUnencryptedHTTP2(true)
		tr.Protocols = &p
	}
	t.Cleanup(tr.CloseIdleConnections)
	cfg.HTTPClient = &http.Client{Transport: tr}
	cfg.Logger = quiet()
	o, err := electionrpc.NewObserver(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// observe runs ObserveLeader until the test ends, sending every leader it
// reports.
func observe(t *testing.T, o *electionrpc.Observer, name string) <-chan election.Leader {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	leaders := make(chan election.Leader, 16)
	ended := make(chan error, 1)
	go func() {
		ended <- o.ObserveLeader(ctx, name, func(l election.Leader) error {
			leaders <- l
			return nil
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-ended; !errors.Is(err, context.Canceled) {
			t.Errorf("ObserveLeader after cancel = %v, want context.Canceled", err)
		}
	})
	return leaders
}

func next(t *testing.T, leaders <-chan election.Leader) election.Leader {
	t.Helper()
	select {
	case l := <-leaders:
		return l
	case <-time.After(20 * time.Second):
		t.Fatal("no leader reported within 20s")
		return election.Leader{}
	}
}

func campaign(t testing.TB, store hastore.Store, address string) *hastore.Leadership {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sess, err := store.OpenSession(ctx, hastore.SessionConfig{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close(context.Background()) })
	l, err := sess.Campaign(ctx, election.JobManager, address)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestObserverFollowsLeaderAcrossReconnects(t *testing.T) {
	for name, h2c := range map[string]bool{"http1.1": false, "h2c": true} {
		t.Run(name, func(t *testing.T) {
			svc := startService(t)
			leaders := observe(t, newObserver(t, "http://"+svc.addr, h2c), election.JobManager)

			if got := next(t, leaders); !got.Token.IsZero() {
				t.Fatalf("first report = %+v, want no leader", got)
			}
			first := campaign(t, svc.store, "http://first")
			got := next(t, leaders)
			if got.Token != first.Token() || got.Address != "http://first" || got.Election != election.JobManager {
				t.Fatalf("report = %+v, want leader %v at http://first", got, first.Token())
			}

			// While the service is unreachable, the leadership changes
			// hands; the reopened stream reports the new leader, and the
			// old one is not reported again.
			svc.stop()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := first.Resign(ctx); err != nil {
				t.Fatal(err)
			}
			second := campaign(t, svc.store, "http://second")
			svc.start(t)
			got = next(t, leaders)
			if got.Token != second.Token() || got.Address != "http://second" {
				t.Fatalf("report after reconnect = %+v, want leader %v at http://second", got, second.Token())
			}
			if got.Token.Epoch <= first.Token().Epoch {
				t.Errorf("new leader's epoch %d is not above the old one's %d", got.Token.Epoch, first.Token().Epoch)
			}
		})
	}
}

func TestObserverRefusedElection(t *testing.T) {
	svc := startService(t)
	o := newObserver(t, "http://"+svc.addr, false)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	called := false
	err := o.ObserveLeader(ctx, "no such election", func(election.Leader) error { called = true; return nil })
	if err == nil || ctx.Err() != nil {
		t.Fatalf("ObserveLeader(invalid) = %v (ctx %v), want an error at once", err, ctx.Err())
	}
	if called {
		t.Error("fn was called for an invalid election")
	}
}

func TestObserverStopsOnFnError(t *testing.T) {
	svc := startService(t)
	o := newObserver(t, "http://"+svc.addr, true)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stop := errors.New("enough")
	if err := o.ObserveLeader(ctx, election.JobManager, func(election.Leader) error { return stop }); !errors.Is(err, stop) {
		t.Fatalf("ObserveLeader = %v, want fn's error", err)
	}
}

func TestObserverRetriesUnreachable(t *testing.T) {
	// Nothing listens: the observer keeps trying until ctx ends.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	o := newObserver(t, "http://"+addr, false)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := o.ObserveLeader(ctx, election.JobManager, func(election.Leader) error { return nil }); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ObserveLeader with nothing listening = %v, want the context's deadline", err)
	}
}

func TestNewObserverValidates(t *testing.T) {
	if _, err := electionrpc.NewObserver(electionrpc.Config{BaseURL: "http://x"}); err == nil {
		t.Error("NewObserver without an HTTP client: no error")
	}
	if _, err := electionrpc.NewObserver(electionrpc.Config{HTTPClient: http.DefaultClient}); err == nil {
		t.Error("NewObserver without a base URL: no error")
	}
	if _, err := electionrpc.NewObserver(electionrpc.Config{HTTPClient: http.DefaultClient, BaseURLs: []string{"http://x", ""}}); err == nil {
		t.Error("NewObserver with an empty base URL: no error")
	}
	if _, err := electionrpc.NewObserver(electionrpc.Config{HTTPClient: http.DefaultClient, BaseURLs: []string{"http://x"}, IdleTimeout: -time.Second}); err == nil {
		t.Error("NewObserver with a negative idle timeout: no error")
	}
	if _, err := electionrpc.NewObserver(electionrpc.Config{HTTPClient: http.DefaultClient, BaseURLs: []string{"http://x"}}); err != nil {
		t.Errorf("NewObserver with BaseURLs only: %v", err)
	}
}

package hastorerpc_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	"github.com/jobplane/jobplane/gen/jobplane/hastore/v1/hastorev1connect"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/sdk/election/electionrpc"
	"github.com/jobplane/jobplane/server/hastore/hastorerpc"
)

// deadURL returns the base URL of a loopback port that nothing listens on.
func deadURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return "http://" + ln.Addr().String()
}

// serveHTTP serves h on a loopback port (HTTP/1.1 and h2c) until the test
// ends, and returns its base URL.
func serveHTTP(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: h, Protocols: &p}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(ln)
	}()
	t.Cleanup(func() {
		srv.Close()
		<-done
	})
	return "http://" + ln.Addr().String()
}

// Two servers of one store: when the one the observer follows goes away,
// it follows the leader through the other, and reports the leader it
// already reported no second time.
func TestObserverMovesToTheNextServer(t *testing.T) {
	first := startService(t)
	path, h := hastorerpc.NewHandler(hastorerpc.HandlerConfig{Store: first.store, Logger: quiet()}).Path()
	opened := make(chan struct{}, 1)
	mux := http.NewServeMux()
	mux.Handle(path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == hastorev1connect.HAStoreServiceObserveLeaderProcedure {
			select {
			case opened <- struct{}{}:
			default:
			}
		}
		h.ServeHTTP(w, r)
	}))
	second := serveHTTP(t, mux)
	leaders := observe(t, newObserverConfig(t, electionrpc.Config{BaseURLs: []string{"http://" + first.addr, second}}, true), election.JobManager)

	if got := next(t, leaders); !got.Token.IsZero() {
		t.Fatalf("first report = %+v, want no leader", got)
	}
	x := campaign(t, first.store, "http://x")
	if got := next(t, leaders); got.Token != x.Token() || got.Address != "http://x" {
		t.Fatalf("report = %+v, want leader %v at http://x", got, x.Token())
	}
	select {
	case <-opened:
		t.Fatal("the observer opened a stream on the second server while the first answered")
	default:
	}

	// The first server stays down: the observer moves to the second, which
	// sends x again (not reported), then the leader's end, then the next.
	first.stop()
	select {
	case <-opened:
	case <-time.After(20 * time.Second):
		t.Fatal("the observer did not move to the second server within 20s")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := x.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if got := next(t, leaders); !got.Token.IsZero() {
		t.Fatalf("report after the move and the resignation = %+v, want no leader (and x not again)", got)
	}
	y := campaign(t, first.store, "http://y")
	if got := next(t, leaders); got.Token != y.Token() || got.Address != "http://y" {
		t.Fatalf("report = %+v, want leader %v at http://y", got, y.Token())
	}
}

// A first server that cannot be reached is passed over for the next.
func TestObserverPassesOverAnUnreachableServer(t *testing.T) {
	svc := startService(t)
	x := campaign(t, svc.store, "http://x")
	leaders := observe(t, newObserverConfig(t, electionrpc.Config{BaseURL: deadURL(t), BaseURLs: []string{"http://" + svc.addr}}, false), election.JobManager)
	if got := next(t, leaders); got.Token != x.Token() {
		t.Fatalf("report = %+v, want leader %v", got, x.Token())
	}
}

// stalled accepts ObserveLeader streams and sends nothing on them, as a
// paused process would.
type stalled struct {
	hastorev1connect.UnimplementedHAStoreServiceHandler
}

func (stalled) ObserveLeader(ctx context.Context, _ *hastorev1.ObserveLeaderRequest, _ *connect.ServerStream[hastorev1.ObserveLeaderResponse]) error {
	<-ctx.Done()
	return ctx.Err()
}

// With an idle timeout, a server that keeps its stream open but silent is
// given up for the next.
func TestObserverGivesUpASilentServer(t *testing.T) {
	svc := startService(t)
	x := campaign(t, svc.store, "http://x")
	silent := serveHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, h := hastorev1connect.NewHAStoreServiceHandler(stalled{})
		h.ServeHTTP(w, r)
	}))
	o := newObserverConfig(t, electionrpc.Config{BaseURLs: []string{silent, "http://" + svc.addr}, IdleTimeout: 300 * time.Millisecond}, true)
	leaders := observe(t, o, election.JobManager)
	if got := next(t, leaders); got.Token != x.Token() {
		t.Fatalf("report = %+v, want leader %v", got, x.Token())
	}
}

// Leader reads the election once (GetLeader, no stream), from the first
// server that answers: a dead first server is passed over, the reads
// follow a new grant, and an invalid election name fails at once,
// without asking the next server.
func TestObserverLeaderReadsOnce(t *testing.T) {
	svc := startService(t)
	path, h := hastorerpc.NewHandler(hastorerpc.HandlerConfig{Store: svc.store, Logger: quiet()}).Path()
	type counts struct{ streams, reads atomic.Int32 }
	counting := func(c *counts) string {
		mux := http.NewServeMux()
		mux.Handle(path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case hastorev1connect.HAStoreServiceObserveLeaderProcedure:
				c.streams.Add(1)
			case hastorev1connect.HAStoreServiceGetLeaderProcedure:
				c.reads.Add(1)
			}
			h.ServeHTTP(w, r)
		}))
		return serveHTTP(t, mux)
	}
	var live, spare counts
	o := newObserverConfig(t, electionrpc.Config{BaseURL: deadURL(t), BaseURLs: []string{counting(&live), counting(&spare)}}, true)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	got, err := o.Leader(ctx, election.JobManager)
	if err != nil || !got.Token.IsZero() {
		t.Fatalf("Leader before a grant = %+v, %v; want no leader", got, err)
	}
	x := campaign(t, svc.store, "http://x")
	if got, err = o.Leader(ctx, election.JobManager); err != nil || got.Token != x.Token() || got.Address != "http://x" {
		t.Fatalf("Leader = %+v, %v; want %v at http://x", got, err, x.Token())
	}
	if err := x.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	y := campaign(t, svc.store, "http://y")
	if got, err = o.Leader(ctx, election.JobManager); err != nil || got.Token != y.Token() {
		t.Fatalf("Leader after a new grant = %+v, %v; want %v", got, err, y.Token())
	}
	if _, err := o.Leader(ctx, "no such election"); err == nil || connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("Leader(invalid) = %v, want INVALID_ARGUMENT", err)
	}
	if n, m := live.reads.Load(), live.streams.Load()+spare.streams.Load(); n != 4 || m != 0 {
		t.Errorf("%d GetLeader calls on the first live server and %d ObserveLeader streams, want 4 and 0", n, m)
	}
	if n := spare.reads.Load(); n != 0 {
		t.Errorf("%d GetLeader calls on the next server, want 0 (the first answered, or refused the name)", n)
	}
}

// BenchmarkObserverGrantRead reads a job election's grant over
// HAStoreService, as a TaskExecutor checks a JobMaster token: with one
// GetLeader call (Leader), and with the first answer of an ObserveLeader
// stream, 32 at a time as a TaskExecutor's AdoptAttempts reads them.
func BenchmarkObserverGrantRead(b *testing.B) {
	svc := startService(b)
	x := campaign(b, svc.store, "http://x")
	o := newObserver(b, "http://"+svc.addr, true)
	name := x.Election()
	for _, mode := range []string{"GetLeader", "ObserveLeader"} {
		b.Run(mode, func(b *testing.B) {
			b.SetParallelism(16) // 32 goroutines on 2 cores
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				for pb.Next() {
					var got election.Leader
					var err error
					if mode == "GetLeader" {
						got, err = o.Leader(ctx, name)
					} else {
						err = o.ObserveLeader(ctx, name, func(l election.Leader) error { got = l; return errStop })
						if errors.Is(err, errStop) {
							err = nil
						}
					}
					if err != nil || got.Token != x.Token() {
						b.Errorf("grant = %v, %v; want %v", got.Token, err, x.Token())
						return
					}
				}
			})
		})
	}
}

var errStop = errors.New("first answer taken")

// Leader tries again, after a pause, when every server failed: a server
// that answers UNAVAILABLE twice (a store without a quorum for a moment)
// answers the third time.
func TestObserverLeaderRetriesUntilAnswered(t *testing.T) {
	svc := startService(t)
	x := campaign(t, svc.store, "http://x")
	path, h := hastorerpc.NewHandler(hastorerpc.HandlerConfig{Store: svc.store, Logger: quiet()}).Path()
	var reads atomic.Int32
	mux := http.NewServeMux()
	mux.Handle(path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == hastorev1connect.HAStoreServiceGetLeaderProcedure && reads.Add(1) <= 2 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"code":"unavailable","message":"no quorum"}`))
			return
		}
		h.ServeHTTP(w, r)
	}))
	o := newObserverConfig(t, electionrpc.Config{BaseURL: serveHTTP(t, mux)}, false)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	got, err := o.Leader(ctx, election.JobManager)
	if err != nil || got.Token != x.Token() {
		t.Fatalf("Leader = %+v, %v; want %v after two refusals", got, err, x.Token())
	}
	if n := reads.Load(); n != 3 {
		t.Errorf("%d GetLeader calls, want 3", n)
	}
	// With no server answering, it gives up when its context ends.
	short, stop := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer stop()
	dead := newObserverConfig(t, electionrpc.Config{BaseURL: deadURL(t)}, false)
	if _, err := dead.Leader(short, election.JobManager); err == nil || short.Err() == nil {
		t.Fatalf("Leader with no server = %v (ctx %v); want an error once the context ended", err, short.Err())
	}
}

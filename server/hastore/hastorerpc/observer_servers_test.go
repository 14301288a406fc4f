package hastorerpc_test

import (
	"context"
	"net"
	"net/http"
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

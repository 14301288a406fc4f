package hastorerpc_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	"github.com/jobplane/jobplane/gen/jobplane/hastore/v1/hastorev1connect"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/sdk/election/electionrpc"
)

// startRelay serves a Handler that relays the leader from the
// HAStoreService at upstream, and returns its base URL.
func startRelay(t *testing.T, upstream string, heartbeat time.Duration) string {
	t.Helper()
	h, err := electionrpc.NewHandler(electionrpc.HandlerConfig{Observer: newObserver(t, upstream, true), Heartbeat: heartbeat, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(h.Path())
	return serveHTTP(t, mux)
}

// A relay serves the leader and its changes as the store does.
func TestRelayFollowsTheLeader(t *testing.T) {
	svc := startService(t)
	relay := startRelay(t, "http://"+svc.addr, 0)
	leaders := observe(t, newObserver(t, relay, false), election.JobManager)
	if got := next(t, leaders); !got.Token.IsZero() {
		t.Fatalf("first report = %+v, want no leader", got)
	}
	x := campaign(t, svc.store, "http://x")
	if got := next(t, leaders); got.Token != x.Token() || got.Address != "http://x" || got.Election != election.JobManager {
		t.Fatalf("report = %+v, want leader %v at http://x", got, x.Token())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := x.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if got := next(t, leaders); !got.Token.IsZero() {
		t.Fatalf("report after the resignation = %+v, want no leader", got)
	}
}

// A relay passes on the store's refusal of an election name, so the
// observer fails at once.
func TestRelayRefusesAnInvalidElection(t *testing.T) {
	svc := startService(t)
	relay := startRelay(t, "http://"+svc.addr, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := newObserver(t, relay, true).ObserveLeader(ctx, "no such election", func(election.Leader) error { return nil })
	if connect.CodeOf(err) != connect.CodeInvalidArgument || ctx.Err() != nil {
		t.Fatalf("ObserveLeader(invalid) through a relay = %v (ctx %v), want INVALID_ARGUMENT at once", err, ctx.Err())
	}
}

// A relay's idle stream carries heartbeats.
func TestRelaySendsHeartbeats(t *testing.T) {
	svc := startService(t)
	relay := startRelay(t, "http://"+svc.addr, 50*time.Millisecond)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stream, err := hastorev1connect.NewHAStoreServiceClient(&http.Client{Transport: tr}, relay).ObserveLeader(ctx, &hastorev1.ObserveLeaderRequest{Election: election.JobManager})
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	// Heartbeats may come before the leader, while the relay reaches the
	// store; after it, only heartbeats come while nothing changes.
	leader, heartbeats := false, 0
	for heartbeats < 2 && stream.Receive() {
		switch {
		case stream.Msg().GetLeader() != nil:
			if leader {
				t.Fatalf("a second leader %v while nothing changed", stream.Msg().GetLeader())
			}
			leader = true
		case stream.Msg().GetHeartbeat() != nil && leader:
			heartbeats++
		}
	}
	if heartbeats < 2 {
		t.Fatalf("stream ended after %d heartbeats following the leader (leader seen: %v): %v", heartbeats, leader, stream.Err())
	}
}

func TestNewHandlerValidates(t *testing.T) {
	if _, err := electionrpc.NewHandler(electionrpc.HandlerConfig{}); err == nil {
		t.Error("NewHandler without an observer: no error")
	}
}

// observerFunc is an election.Observer made of a function.
type observerFunc func(ctx context.Context, name string, fn func(election.Leader) error) error

func (f observerFunc) ObserveLeader(ctx context.Context, name string, fn func(election.Leader) error) error {
	return f(ctx, name, fn)
}

// serveObserver serves a Handler of o with the given heartbeat, and
// returns a client of it whose idle connections close when the test ends.
func serveObserver(t *testing.T, o election.Observer, heartbeat time.Duration) hastorev1connect.HAStoreServiceClient {
	t.Helper()
	h, err := electionrpc.NewHandler(electionrpc.HandlerConfig{Observer: o, Heartbeat: heartbeat, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(h.Path())
	url := serveHTTP(t, mux)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return hastorev1connect.NewHAStoreServiceClient(&http.Client{Transport: tr}, url)
}

// An observer's failure other than a refused election name reaches the
// client as UNAVAILABLE, without its detail.
func TestHandlerHidesObserverFailures(t *testing.T) {
	failing := observerFunc(func(context.Context, string, func(election.Leader) error) error {
		return errors.New("secret internal detail")
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stream, err := serveObserver(t, failing, time.Hour).ObserveLeader(ctx, &hastorev1.ObserveLeaderRequest{Election: election.JobManager})
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	for stream.Receive() {
		t.Fatalf("message %v from a failed observer", stream.Msg())
	}
	err = stream.Err()
	if connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("stream error = %v, want UNAVAILABLE", err)
	}
	if strings.Contains(err.Error(), "secret") {
		t.Fatalf("stream error %q carries the observer's detail", err)
	}
}

// When the client goes away, the handler ends its observation.
func TestHandlerEndsTheObservationWithTheClient(t *testing.T) {
	svc := startService(t)
	ended := make(chan error, 1)
	o := observerFunc(func(ctx context.Context, name string, fn func(election.Leader) error) error {
		err := svc.store.ObserveLeader(ctx, name, fn)
		ended <- err
		return err
	})
	client := serveObserver(t, o, time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stream, err := client.ObserveLeader(ctx, &hastorev1.ObserveLeaderRequest{Election: election.JobManager})
	if err != nil {
		t.Fatal(err)
	}
	if !stream.Receive() || stream.Msg().GetLeader() == nil {
		t.Fatalf("first message = %v (err %v), want the leader", stream.Msg(), stream.Err())
	}
	select {
	case err := <-ended:
		t.Fatalf("the observation ended (%v) while the client was there", err)
	default:
	}
	cancel()
	stream.Close()
	select {
	case err := <-ended:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("observation ended with %v, want context.Canceled", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the observation did not end within 20s of the client going away")
	}
}

// A relay answers GetLeader as the store does (its TaskExecutors check
// JobMaster tokens with it), and passes on the refusal of an election
// name.
func TestRelayReadsTheLeaderOnce(t *testing.T) {
	svc := startService(t)
	relay := startRelay(t, "http://"+svc.addr, 0)
	x := campaign(t, svc.store, "http://x")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rpc := hastorev1connect.NewHAStoreServiceClient(http.DefaultClient, relay)
	resp, err := rpc.GetLeader(ctx, &hastorev1.GetLeaderRequest{Election: election.JobManager})
	if err != nil || resp.GetLeader().GetToken().GetEpoch() != x.Token().Epoch || resp.GetLeader().GetAddress() != "http://x" {
		t.Fatalf("GetLeader through a relay = %v, %v; want %v at http://x", resp, err, x.Token())
	}
	if _, err := rpc.GetLeader(ctx, &hastorev1.GetLeaderRequest{Election: "no such election"}); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("GetLeader(invalid) through a relay = %v, want INVALID_ARGUMENT", err)
	}
}

// observeOnly serves ObserveLeader alone, as a relay of an older release
// did: GetLeader answers UNIMPLEMENTED.
type observeOnly struct {
	hastorev1connect.UnimplementedHAStoreServiceHandler
	relay *electionrpc.Handler
}

func (o observeOnly) ObserveLeader(ctx context.Context, req *hastorev1.ObserveLeaderRequest, stream *connect.ServerStream[hastorev1.ObserveLeaderResponse]) error {
	return o.relay.ObserveLeader(ctx, req, stream)
}

// An Observer reads the leader from a server that does not serve
// GetLeader with the first answer of ObserveLeader.
func TestObserverLeaderFromAServerWithoutGetLeader(t *testing.T) {
	svc := startService(t)
	x := campaign(t, svc.store, "http://x")
	h, err := electionrpc.NewHandler(electionrpc.HandlerConfig{Observer: newObserver(t, "http://"+svc.addr, true), Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(hastorev1connect.NewHAStoreServiceHandler(observeOnly{relay: h}))
	o := newObserver(t, serveHTTP(t, mux), false)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if got, err := o.Leader(ctx, election.JobManager); err != nil || got.Token != x.Token() {
		t.Fatalf("Leader from a server without GetLeader = %+v, %v; want %v", got, err, x.Token())
	}
}

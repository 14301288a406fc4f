package jobmanager_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/jobplane/jobplane/gen/jobplane/cluster/v1/clusterv1connect"
	"github.com/jobplane/jobplane/gen/jobplane/hastore/v1/hastorev1connect"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/sdk/election/electionrpc"
	"github.com/jobplane/jobplane/sdk/wire/transport"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/hastore/etcdstore"
	"github.com/jobplane/jobplane/server/hastore/hastorerpc"
	"github.com/jobplane/jobplane/server/internal/endpoint"
	"github.com/jobplane/jobplane/server/internal/jobmanager"
)

// healthProcess is a JobManager process in a test: its endpoint, which
// also serves the store as HAStoreService, and the JobManager, each
// stoppable on its own.
type healthProcess struct {
	ep             *endpoint.Endpoint
	stopJM, stopEP func()
	connectHealth  *grpchealth.Client
	grpcHealth     healthpb.HealthClient
}

func startHealthProcess(t *testing.T, store hastore.Store) *healthProcess {
	t.Helper()
	log := testLogger()
	ep, err := endpoint.Listen(endpoint.Config{Listen: "127.0.0.1:0", ShutdownTimeout: time.Second}, log)
	if err != nil {
		t.Fatal(err)
	}
	client := transport.NewClient(nil)
	t.Cleanup(client.CloseIdleConnections)
	jm, err := jobmanager.New(jobmanager.Config{
		Store: store, Address: ep.URL(), HTTPClient: client, SessionTTL: 2 * time.Second,
		HeartbeatInterval: 100 * time.Millisecond, HeartbeatTimeout: time.Second, Logger: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	ep.Mount(hastorev1connect.HAStoreServiceName, hastorerpc.NewHandler(hastorerpc.HandlerConfig{Store: store, Heartbeat: electionrpc.DefaultHeartbeat, Logger: log}).Path)
	jm.Mount(ep)
	p := &healthProcess{ep: ep, stopEP: runUntilCleanup(t, ep.Run), stopJM: runUntilCleanup(t, jm.Run)}
	h2c := new(http.Protocols)
	h2c.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: h2c}
	t.Cleanup(tr.CloseIdleConnections)
	p.connectHealth = grpchealth.NewClient(&http.Client{Transport: tr}, ep.URL(), connect.WithGRPC())
	conn, err := grpc.NewClient(ep.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	p.grpcHealth = healthpb.NewHealthClient(conn)
	return p
}

// runUntilCleanup runs f until stop is called or the test ends.
func runUntilCleanup(t *testing.T, f func(context.Context) error) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("stopped with %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

var leaderOnlyServices = []string{
	jobplanev1connect.DispatcherServiceName,
	clusterv1connect.ResourceManagerServiceName,
	clusterv1connect.JobMasterServiceName,
}

// wantHealth checks, with a connect-go and a grpc-go client, that every
// leader-only service of p is SERVING (leading) or NOT_SERVING (standby),
// while the store's service and the process as a whole ("") are SERVING.
func (p *healthProcess) wantHealth(t *testing.T, leading bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	want := map[string]bool{"": true, hastorev1connect.HAStoreServiceName: true}
	for _, s := range leaderOnlyServices {
		want[s] = leading
	}
	for svc, serving := range want {
		wantConnect, wantGRPC := grpchealth.StatusNotServing, healthpb.HealthCheckResponse_NOT_SERVING
		if serving {
			wantConnect, wantGRPC = grpchealth.StatusServing, healthpb.HealthCheckResponse_SERVING
		}
		if resp, err := p.connectHealth.Check(ctx, &grpchealth.CheckRequest{Service: svc}); err != nil || resp.Status != wantConnect {
			t.Errorf("%s: connect Check(%q) = %v, %v; want %v", p.ep.URL(), svc, resp, err, wantConnect)
		}
		if resp, err := p.grpcHealth.Check(ctx, &healthpb.HealthCheckRequest{Service: svc}); err != nil || resp.GetStatus() != wantGRPC {
			t.Errorf("%s: grpc-go Check(%q) = %v, %v; want %v", p.ep.URL(), svc, resp, err, wantGRPC)
		}
	}
}

// awaitWatch waits, within a deadline, for a health Watch stream to report
// want.
func awaitWatch(t *testing.T, what string, stream grpc.ServerStreamingClient[healthpb.HealthCheckResponse], want healthpb.HealthCheckResponse_ServingStatus) {
	t.Helper()
	for {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("%s: watch: %v (waiting for %v)", what, err, want)
		}
		if resp.GetStatus() == want {
			return
		}
	}
}

// Two JobManagers on one store: the leader's leader-only services are
// SERVING and the standby's NOT_SERVING, so a load balancer checking them
// routes to the leader; when the leader resigns (its process still
// serving), both flip, as Check and Watch streams of connect-go and
// grpc-go clients see.
func TestHealthFollowsLeadership(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	store, err := etcdstore.Open(ctx, etcdstore.OpenConfig{DataDir: t.TempDir(), Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })

	a := startHealthProcess(t, store)
	// A leads once its DispatcherService says so.
	aWatch, err := a.grpcHealth.Watch(ctx, &healthpb.HealthCheckRequest{Service: jobplanev1connect.DispatcherServiceName})
	if err != nil {
		t.Fatal(err)
	}
	awaitWatch(t, "a", aWatch, healthpb.HealthCheckResponse_SERVING)
	if info, err := store.Leader(ctx, election.JobManager); err != nil || info.Address != a.ep.URL() {
		t.Fatalf("leader = %+v, %v; want %s", info, err, a.ep.URL())
	}
	b := startHealthProcess(t, store)
	bWatch, err := b.grpcHealth.Watch(ctx, &healthpb.HealthCheckRequest{Service: jobplanev1connect.DispatcherServiceName})
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := bWatch.Recv(); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("standby's first watch event = %v, %v; want NOT_SERVING", resp, err)
	}
	bConnectWatch := b.connectHealth.Watch(ctx, &grpchealth.CheckRequest{Service: clusterv1connect.ResourceManagerServiceName})
	if ev := <-bConnectWatch; ev.Err != nil || ev.Response.Status != grpchealth.StatusNotServing {
		t.Fatalf("standby's first connect watch event = %+v, want NOT_SERVING", ev)
	}
	a.wantHealth(t, true)
	b.wantHealth(t, false)

	// A resigns; its endpoint keeps serving.
	a.stopJM()
	awaitWatch(t, "a", aWatch, healthpb.HealthCheckResponse_NOT_SERVING)
	awaitWatch(t, "b", bWatch, healthpb.HealthCheckResponse_SERVING)
	for ev := range bConnectWatch {
		if ev.Err != nil {
			t.Fatalf("standby's connect watch: %v", ev.Err)
		}
		if ev.Response.Status == grpchealth.StatusServing {
			break
		}
	}
	if info, err := store.Leader(ctx, election.JobManager); err != nil || info.Address != b.ep.URL() {
		t.Fatalf("leader after a resigned = %+v, %v; want %s", info, err, b.ep.URL())
	}
	a.wantHealth(t, false)
	b.wantHealth(t, true)

	// B stops as SIGTERM stops a process: its leader-only services turn
	// NOT_SERVING as its leadership ends, before its listener closes.
	b.stopJM()
	awaitWatch(t, "b", bWatch, healthpb.HealthCheckResponse_NOT_SERVING)
	b.wantHealth(t, false)
}

package main

import (
	"context"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/jobplane/jobplane/gen/jobplane/cluster/v1/clusterv1connect"
	"github.com/jobplane/jobplane/gen/jobplane/hastore/v1/hastorev1connect"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
)

// grpcHealth returns a grpc-go health client of the process at addr, over
// h2c.
func grpcHealth(t *testing.T, addr string) healthpb.HealthClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return healthpb.NewHealthClient(conn)
}

// healthOf returns the status of service at the process, or the error's
// code.
func healthOf(hc healthpb.HealthClient, service string) (healthpb.HealthCheckResponse_ServingStatus, codes.Code) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	return resp.GetStatus(), status.Code(err)
}

// Two jobmanager processes on one hastore process: gRPC health says
// which one leads (its DispatcherService, ResourceManagerService and
// JobMasterService SERVING, the standby's NOT_SERVING; HAStoreService and
// the process as a whole SERVING on both). When the leader is killed, a
// Watch on the standby sees it turn SERVING; when that one is stopped with
// SIGTERM, its Watch sees NOT_SERVING before the stream ends.
func TestHealthFlipsWhenTheLeaderDies(t *testing.T) {
	store := startHAStore(t)
	timings := []string{"--hastore", store, "--session-ttl", "2s", "--heartbeat-interval", "200ms", "--heartbeat-timeout", "1200ms"}
	var procs []*process
	var health []healthpb.HealthClient
	for range 2 {
		p, addr := startServer(t, "jobmanager", timings...)
		procs = append(procs, p)
		health = append(health, grpcHealth(t, addr))
	}

	// The store's process serves HAStoreService and nothing leader-only.
	storeHealth := grpcHealth(t, store[len("http://"):])
	if st, code := healthOf(storeHealth, hastorev1connect.HAStoreServiceName); code != codes.OK || st != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("hastore: HAStoreService = %v, %v; want SERVING", st, code)
	}
	if _, code := healthOf(storeHealth, jobplanev1connect.DispatcherServiceName); code != codes.NotFound {
		t.Errorf("hastore: DispatcherService code = %v, want NotFound (not served there)", code)
	}

	// Exactly one leads.
	leader := -1
	deadline := time.Now().Add(60 * time.Second)
	for leader < 0 {
		for i, hc := range health {
			if st, _ := healthOf(hc, jobplanev1connect.DispatcherServiceName); st == healthpb.HealthCheckResponse_SERVING {
				leader = i
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no jobmanager's DispatcherService SERVING after 60s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	standby := 1 - leader
	for i, hc := range health {
		want := healthpb.HealthCheckResponse_NOT_SERVING
		if i == leader {
			want = healthpb.HealthCheckResponse_SERVING
		}
		for _, svc := range []string{jobplanev1connect.DispatcherServiceName, clusterv1connect.ResourceManagerServiceName, clusterv1connect.JobMasterServiceName} {
			if st, code := healthOf(hc, svc); code != codes.OK || st != want {
				t.Errorf("jobmanager %d (leader %d): %s = %v, %v; want %v", i, leader, svc, st, code, want)
			}
		}
		for _, svc := range []string{"", hastorev1connect.HAStoreServiceName} {
			if st, code := healthOf(hc, svc); code != codes.OK || st != healthpb.HealthCheckResponse_SERVING {
				t.Errorf("jobmanager %d: %q = %v, %v; want SERVING", i, svc, st, code)
			}
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	watch, err := health[standby].Watch(ctx, &healthpb.HealthCheckRequest{Service: jobplanev1connect.DispatcherServiceName})
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := watch.Recv(); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("standby's first watch event = %v, %v; want NOT_SERVING", resp, err)
	}
	if err := procs[leader].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	procs[leader].wait(t, 20*time.Second)
	if resp, err := watch.Recv(); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("standby's watch event after the leader died = %v, %v; want SERVING", resp, err)
	}
	if st, _ := healthOf(health[standby], clusterv1connect.ResourceManagerServiceName); st != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("new leader's ResourceManagerService = %v, want SERVING", st)
	}

	// SIGTERM: NOT_SERVING while the process still answers, then the end.
	if err := procs[standby].cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if resp, err := watch.Recv(); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("watch event after SIGTERM = %v, %v; want NOT_SERVING", resp, err)
	}
	cancel() // an open stream would hold the graceful shutdown
	if code := procs[standby].wait(t, 20*time.Second); code != exitOK {
		t.Errorf("exit code after SIGTERM = %d, want %d", code, exitOK)
	}
}

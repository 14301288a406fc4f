package endpoint_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/jobplane/jobplane/server/internal/endpoint"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// start runs an endpoint on a loopback port until the test ends.
func start(t *testing.T) *endpoint.Endpoint {
	t.Helper()
	return startWith(t, endpoint.Config{Listen: "127.0.0.1:0"})
}

// startWith runs an endpoint of cfg until the test ends.
func startWith(t *testing.T, cfg endpoint.Config) *endpoint.Endpoint {
	t.Helper()
	ep, err := endpoint.Listen(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	return run(t, ep)
}

// run serves ep until the test ends, and checks that Run stops cleanly.
func run(t *testing.T, ep *endpoint.Endpoint) *endpoint.Endpoint {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ep.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return ep
}

func http1Client(t *testing.T) *http.Client {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// h2cClient speaks HTTP/2 with prior knowledge over plain TCP.
func h2cClient(t *testing.T) *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &p}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

func TestHealthOverEveryProtocol(t *testing.T) {
	ep := start(t)
	cases := []struct {
		name      string
		client    *http.Client
		opts      []connect.ClientOption
		wantProto int // the HTTP major version the server must see
	}{
		{"connect/http1.1", http1Client(t), nil, 1},
		{"connect/h2c", h2cClient(t), nil, 2},
		{"grpc/h2c", h2cClient(t), []connect.ClientOption{connect.WithGRPC()}, 2},
		{"grpcweb/http1.1", http1Client(t), []connect.ClientOption{connect.WithGRPCWeb()}, 1},
		{"grpcweb/h2c", h2cClient(t), []connect.ClientOption{connect.WithGRPCWeb()}, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var seen int
			client := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
				resp, err := tc.client.Transport.RoundTrip(r)
				if err == nil {
					seen = resp.ProtoMajor
				}
				return resp, err
			})}
			hc := grpchealth.NewClient(client, ep.URL(), tc.opts...)
			resp, err := hc.Check(context.Background(), &grpchealth.CheckRequest{})
			if err != nil {
				t.Fatalf("Check: %v", err)
			}
			if resp.Status != grpchealth.StatusServing {
				t.Errorf("status = %v, want SERVING", resp.Status)
			}
			if seen != tc.wantProto {
				t.Errorf("HTTP/%d used, want HTTP/%d", seen, tc.wantProto)
			}
		})
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestHealthWithGRPCGoClient(t *testing.T) {
	ep := start(t)
	conn, err := grpc.NewClient(ep.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("grpc.NewClient: %v", err)
	}
	defer conn.Close()
	resp, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("status = %v, want SERVING", resp.GetStatus())
	}
	// An unknown service is NOT_FOUND, as gRPC health specifies.
	_, err = healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: "no.such.Service"})
	if got := status.Code(err); got != codes.NotFound {
		t.Errorf("unknown service: code = %v, want NotFound", got)
	}
}

func TestMountedServiceIsHealthyAndReflected(t *testing.T) {
	ep, err := endpoint.Listen(endpoint.Config{Listen: "127.0.0.1:0"}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	// Any service whose descriptor is registered will do; this one is
	// compiled in through the gRPC health package.
	const svc = "grpc.reflection.v1alpha.ServerReflection"
	ep.Mount(svc, func(...connect.HandlerOption) (string, http.Handler) { return "/test.only/", http.NotFoundHandler() })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ep.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	client := h2cClient(t)

	hc := grpchealth.NewClient(client, ep.URL(), connect.WithGRPC())
	resp, err := hc.Check(context.Background(), &grpchealth.CheckRequest{Service: svc})
	if err != nil || resp.Status != grpchealth.StatusServing {
		t.Fatalf("Check(%s) = %v, %v; want SERVING", svc, resp, err)
	}
	stream := grpcreflect.NewClient(client, ep.URL()).NewStream(context.Background())
	defer stream.Close()
	names, err := stream.ListServices()
	if err != nil {
		t.Fatalf("ListServices: %v", err)
	}
	if !slices.Contains(names, svc) {
		t.Errorf("services %v lack the mounted %s", names, svc)
	}
}

func TestReflectionListsServices(t *testing.T) {
	ep := start(t)
	stream := grpcreflect.NewClient(h2cClient(t), ep.URL()).NewStream(context.Background())
	defer stream.Close()
	names, err := stream.ListServices()
	if err != nil {
		t.Fatalf("ListServices: %v", err)
	}
	for _, want := range []protoreflect.FullName{grpchealth.HealthV1ServiceName, grpcreflect.ReflectV1ServiceName} {
		if !slices.Contains(names, want) {
			t.Errorf("services %v lack %s", names, want)
		}
	}
}

func TestShutdownTurnsHealthNotServing(t *testing.T) {
	ep, err := endpoint.Listen(endpoint.Config{Listen: "127.0.0.1:0", ShutdownTimeout: 2 * time.Second}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ep.Run(ctx) }()

	watchCtx, stopWatch := context.WithTimeout(context.Background(), 10*time.Second)
	defer stopWatch()
	events := grpchealth.NewClient(h2cClient(t), ep.URL(), connect.WithGRPC()).Watch(watchCtx, &grpchealth.CheckRequest{})
	if ev := <-events; ev.Err != nil || ev.Response.Status != grpchealth.StatusServing {
		t.Fatalf("first watch event = %+v, want SERVING", ev)
	}
	cancel()
	if ev := <-events; ev.Err != nil || ev.Response.Status != grpchealth.StatusNotServing {
		t.Errorf("watch event after shutdown began = %+v, want NOT_SERVING", ev)
	}
	stopWatch()
	for range events {
	}
	if err := <-done; err != nil {
		t.Errorf("Run after cancel = %v, want nil", err)
	}
	if _, err := net.DialTimeout("tcp", ep.Addr().String(), time.Second); err == nil {
		t.Error("listener still accepts connections after shutdown")
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg     endpoint.Config
		wantErr bool
	}{
		{endpoint.Config{Listen: "127.0.0.1:0"}, false},
		{endpoint.Config{}, true},
		{endpoint.Config{Listen: "no-port"}, true},
		{endpoint.Config{Listen: "127.0.0.1:0", ShutdownTimeout: -time.Second}, true},
		{endpoint.Config{Listen: "127.0.0.1:0", MaxRequestBytes: 1}, false},
		{endpoint.Config{Listen: "127.0.0.1:0", MaxRequestBytes: -1}, true},
		{endpoint.Config{Listen: "127.0.0.1:0", MaxRequestBytes: 1 << 31}, true},
	} {
		if err := tc.cfg.Validate(); (err != nil) != tc.wantErr {
			t.Errorf("Validate(%+v) = %v, wantErr %v", tc.cfg, err, tc.wantErr)
		}
	}
}

package endpoint_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/jobplane/jobplane/sdk/wire/transport"
	"github.com/jobplane/jobplane/server/internal/endpoint"
	"github.com/jobplane/jobplane/server/internal/testcert"
)

// startTLS runs an endpoint serving cert on a loopback port until the
// test ends.
func startTLS(t *testing.T, cert *testcert.Cert) *endpoint.Endpoint {
	t.Helper()
	return startWith(t, endpoint.Config{Listen: "127.0.0.1:0", TLSCertFile: cert.CertFile, TLSKeyFile: cert.KeyFile})
}

// An endpoint with a certificate serves TLS, its URL is https://, and
// ALPN picks HTTP/2 or HTTP/1.1 as the client asks; every protocol works
// over both, and a cleartext client is refused.
func TestTLSServesEveryProtocolByALPN(t *testing.T) {
	cert := testcert.New(t)
	ep := startTLS(t, cert)
	if want := "https://" + ep.Addr().String(); ep.URL() != want {
		t.Fatalf("URL = %q, want %q", ep.URL(), want)
	}
	var h1 http.Protocols
	h1.SetHTTP1(true)
	h1Transport := &http.Transport{Protocols: &h1, TLSClientConfig: cert.ClientConfig()}
	t.Cleanup(h1Transport.CloseIdleConnections)
	h2Client := transport.NewClient(cert.ClientConfig())
	t.Cleanup(h2Client.CloseIdleConnections)

	for _, tc := range []struct {
		name      string
		transport http.RoundTripper
		opts      []connect.ClientOption
		wantProto int
	}{
		{"connect/h2", h2Client.Transport, nil, 2},
		{"grpc/h2", h2Client.Transport, []connect.ClientOption{connect.WithGRPC()}, 2},
		{"grpcweb/h2", h2Client.Transport, []connect.ClientOption{connect.WithGRPCWeb()}, 2},
		{"connect/http1.1", h1Transport, nil, 1},
		{"grpcweb/http1.1", h1Transport, []connect.ClientOption{connect.WithGRPCWeb()}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var seen atomic.Int32
			var tlsSeen atomic.Bool
			client := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
				resp, err := tc.transport.RoundTrip(r)
				if err == nil {
					seen.Store(int32(resp.ProtoMajor))
					tlsSeen.Store(resp.TLS != nil)
				}
				return resp, err
			})}
			resp, err := grpchealth.NewClient(client, ep.URL(), tc.opts...).Check(context.Background(), &grpchealth.CheckRequest{})
			if err != nil {
				t.Fatalf("Check: %v", err)
			}
			if resp.Status != grpchealth.StatusServing {
				t.Errorf("status = %v, want SERVING", resp.Status)
			}
			if got := int(seen.Load()); got != tc.wantProto || !tlsSeen.Load() {
				t.Errorf("HTTP/%d (TLS %v) used, want HTTP/%d over TLS", got, tlsSeen.Load(), tc.wantProto)
			}
		})
	}

	t.Run("grpc-go", func(t *testing.T) {
		conn, err := grpc.NewClient(ep.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(cert.ClientConfig())))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		resp, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("Check = %v, %v; want SERVING", resp, err)
		}
	})

	t.Run("cleartext refused", func(t *testing.T) {
		c := h2cClient(t)
		_, err := grpchealth.NewClient(c, "http://"+ep.Addr().String(), connect.WithGRPC()).Check(context.Background(), &grpchealth.CheckRequest{})
		if err == nil {
			t.Error("an h2c call to the TLS port succeeded")
		}
	})

	t.Run("untrusted", func(t *testing.T) {
		c := transport.NewClient(testcert.New(t).ClientConfig())
		defer c.CloseIdleConnections()
		_, err := grpchealth.NewClient(c, ep.URL()).Check(context.Background(), &grpchealth.CheckRequest{})
		if err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Errorf("call trusting another authority: err = %v, want a certificate error", err)
		}
	})
}

// Listen refuses half a TLS pair, unreadable or bad files, and an
// http:// advertised URL with TLS, naming what is wrong.
func TestTLSConfigErrors(t *testing.T) {
	cert, other := testcert.New(t), testcert.New(t)
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	for _, tc := range []struct {
		name      string
		cfg       endpoint.Config
		wantInErr string
	}{
		{"cert without key", endpoint.Config{TLSCertFile: cert.CertFile}, "needs its key"},
		{"key without cert", endpoint.Config{TLSKeyFile: cert.KeyFile}, "needs its certificate"},
		{"missing cert", endpoint.Config{TLSCertFile: missing, TLSKeyFile: cert.KeyFile}, "missing.pem"},
		{"missing key", endpoint.Config{TLSCertFile: cert.CertFile, TLSKeyFile: missing}, "missing.pem"},
		{"garbage cert", endpoint.Config{TLSCertFile: garbage, TLSKeyFile: cert.KeyFile}, "garbage.pem"},
		{"key of another cert", endpoint.Config{TLSCertFile: cert.CertFile, TLSKeyFile: other.KeyFile}, "does not match"},
		{"http advertise", endpoint.Config{TLSCertFile: cert.CertFile, TLSKeyFile: cert.KeyFile, Advertise: "http://127.0.0.1:8080"}, "https://"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Listen = "127.0.0.1:0"
			ep, err := endpoint.Listen(tc.cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
			if err == nil {
				ep.Close()
				t.Fatal("Listen succeeded")
			}
			if !strings.Contains(err.Error(), tc.wantInErr) {
				t.Errorf("err = %v, want it to mention %q", err, tc.wantInErr)
			}
		})
	}
	// An https:// advertised URL goes with TLS.
	if err := (endpoint.Config{Listen: "0.0.0.0:0", TLSCertFile: cert.CertFile, TLSKeyFile: cert.KeyFile, Advertise: "https://host1:8443"}).Validate(); err != nil {
		t.Errorf("Validate with an https advertised URL: %v", err)
	}
}

func TestClientTLSConfig(t *testing.T) {
	cert := testcert.New(t)
	cfg, err := endpoint.ClientTLSConfig(cert.CertFile)
	if err != nil || cfg == nil || cfg.RootCAs == nil {
		t.Fatalf("ClientTLSConfig(cert) = %v, %v; want roots", cfg, err)
	}
	if cfg, err := endpoint.ClientTLSConfig(""); cfg != nil || err != nil {
		t.Errorf("ClientTLSConfig(\"\") = %v, %v; want nil, nil (the system's roots)", cfg, err)
	}
	if _, err := endpoint.ClientTLSConfig(cert.KeyFile); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Errorf("ClientTLSConfig(key) = %v, want no PEM certificate", err)
	}
	if _, err := endpoint.ClientTLSConfig(filepath.Join(t.TempDir(), "none")); err == nil {
		t.Error("ClientTLSConfig of a missing file succeeded")
	}
	// The configuration verifies the endpoint's certificate.
	ep := startTLS(t, cert)
	c := transport.NewClient(cfg)
	defer c.CloseIdleConnections()
	if _, err := grpchealth.NewClient(c, ep.URL()).Check(context.Background(), &grpchealth.CheckRequest{}); err != nil {
		t.Errorf("Check through ClientTLSConfig's roots: %v", err)
	}
}

package endpoint_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/jobplane/jobplane/server/internal/certs"
	"github.com/jobplane/jobplane/server/internal/endpoint"
	"github.com/jobplane/jobplane/server/localcluster"
)

// pki is a CA in a directory, and the certificates it issued.
type pki struct {
	dir string
	ca  *certs.CA
}

func newPKI(t *testing.T, name string) *pki {
	t.Helper()
	ca, err := certs.NewCA(name, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	p := &pki{dir: t.TempDir(), ca: ca}
	if err := ca.Write(p.dir); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *pki) caFile() string { return filepath.Join(p.dir, certs.CACertFile) }

// issue writes a certificate for 127.0.0.1 named name into dir.
func (p *pki) issue(t *testing.T, dir, name string) (certFile, keyFile string) {
	t.Helper()
	c, k, err := p.ca.Issue(name, []string{"127.0.0.1", "localhost"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, err = certs.WriteKeyPair(dir, name, c, k)
	if err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

const (
	clusterService = "test.v1.ClusterService"
	publicService  = "test.v1.PublicService"
)

// startMTLS runs an endpoint with client certificates of clientCA that
// serves clusterService and publicService (public); each answers 200.
func startMTLS(t *testing.T, certFile, keyFile, clientCA string, log io.Writer) *endpoint.Endpoint {
	t.Helper()
	ep, err := endpoint.Listen(endpoint.Config{
		Listen: "127.0.0.1:0", TLSCertFile: certFile, TLSKeyFile: keyFile, ClientCAFile: clientCA,
		PublicServices: []string{publicService},
	}, slog.New(slog.NewTextHandler(log, nil)))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{clusterService, publicService} {
		ep.Mount(s, func(...connect.HandlerOption) (string, http.Handler) {
			return "/" + s + "/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
		})
	}
	return run(t, ep)
}

// call posts to service on ep with a new client of files; it returns the
// HTTP status, or the error of a call that got no answer.
func call(t *testing.T, ep *endpoint.Endpoint, files endpoint.ClientFiles, service string) (int, error) {
	t.Helper()
	tlsFiles, err := endpoint.NewClientTLS(files, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	c := tlsFiles.NewClient()
	defer c.CloseIdleConnections()
	resp, err := c.Post(ep.URL()+"/"+service+"/Call", "application/json", strings.NewReader("{}"))
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// With a client CA, the cluster's services answer only callers with a
// certificate it signed; public services, health and reflection answer
// any TLS client; a certificate of another CA fails the handshake.
func TestClientCertificates(t *testing.T) {
	cluster, foreign := newPKI(t, "cluster"), newPKI(t, "foreign")
	dir := t.TempDir()
	srvCert, srvKey := cluster.issue(t, dir, "server")
	goodCert, goodKey := cluster.issue(t, dir, "good")
	badCert, badKey := foreign.issue(t, dir, "bad")
	ep := startMTLS(t, srvCert, srvKey, cluster.caFile(), io.Discard)

	good := endpoint.ClientFiles{CAFile: cluster.caFile(), CertFile: goodCert, KeyFile: goodKey}
	none := endpoint.ClientFiles{CAFile: cluster.caFile()}
	bad := endpoint.ClientFiles{CAFile: cluster.caFile(), CertFile: badCert, KeyFile: badKey}
	for _, tc := range []struct {
		name    string
		files   endpoint.ClientFiles
		service string
		want    int // 0: the handshake fails
	}{
		{"cluster service, cluster certificate", good, clusterService, http.StatusOK},
		{"public service, cluster certificate", good, publicService, http.StatusOK},
		{"cluster service, no certificate", none, clusterService, http.StatusUnauthorized},
		{"public service, no certificate", none, publicService, http.StatusOK},
		{"cluster service, foreign certificate", bad, clusterService, 0},
		{"public service, foreign certificate", bad, publicService, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := call(t, ep, tc.files, tc.service)
			if tc.want == 0 {
				// Under TLS 1.3 the client learns of the refusal only
				// after its handshake, so the error need not say why;
				// the server's log does.
				if err == nil {
					t.Errorf("status %d, err %v; want a refused handshake", got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("status %d, err %v; want %d", got, err, tc.want)
			}
		})
	}
	t.Run("health without certificate", func(t *testing.T) {
		tlsFiles, err := endpoint.NewClientTLS(none, nil)
		if err != nil {
			t.Fatal(err)
		}
		c := tlsFiles.NewClient()
		defer c.CloseIdleConnections()
		if _, err := grpchealth.NewClient(c, ep.URL()).Check(context.Background(), &grpchealth.CheckRequest{}); err != nil {
			t.Errorf("health check without a client certificate: %v", err)
		}
	})
	t.Run("connect code", func(t *testing.T) {
		tlsFiles, _ := endpoint.NewClientTLS(none, nil)
		c := tlsFiles.NewClient()
		defer c.CloseIdleConnections()
		hc := connect.NewClient[emptypb.Empty, emptypb.Empty](c, ep.URL()+"/"+clusterService+"/Call", connect.WithGRPC())
		_, err := hc.CallUnary(context.Background(), connect.NewRequest(&emptypb.Empty{}))
		if connect.CodeOf(err) != connect.CodeUnauthenticated || !strings.Contains(err.Error(), "client certificate") {
			t.Errorf("err = %v, want UNAUTHENTICATED naming the client certificate", err)
		}
	})
}

// The endpoint and its clients read their certificates, keys and CA
// files again when they change: new connections use the new files, and a
// bad file leaves the last good one in use, logged.
func TestCertificateReload(t *testing.T) {
	oldCA, newCA := newPKI(t, "old"), newPKI(t, "new")
	srvDir, cliDir := t.TempDir(), t.TempDir()
	srvCert, srvKey := oldCA.issue(t, srvDir, "server")
	cliCert, cliKey := oldCA.issue(t, cliDir, "client")
	// The files each side is configured with; rotation rewrites them.
	srvCA, cliCA := filepath.Join(srvDir, "clients-ca.pem"), filepath.Join(cliDir, "ca.pem")
	copyFile(t, oldCA.caFile(), srvCA)
	copyFile(t, oldCA.caFile(), cliCA)
	var log localcluster.Buffer
	ep := startMTLS(t, srvCert, srvKey, srvCA, &log)

	files := endpoint.ClientFiles{CAFile: cliCA, CertFile: cliCert, KeyFile: cliKey}
	tlsFiles, err := endpoint.NewClientTLS(files, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	client := tlsFiles.NewClient() // one client for the whole test, as a process has
	defer client.CloseIdleConnections()
	post := func() error {
		client.CloseIdleConnections() // a new connection, a new handshake
		resp, err := client.Post(ep.URL()+"/"+clusterService+"/Call", "application/json", strings.NewReader("{}"))
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return &statusError{resp.StatusCode}
		}
		return nil
	}
	if err := post(); err != nil {
		t.Fatalf("before rotation: %v", err)
	}

	// The server moves to the new CA: its certificate and the clients' CA.
	newCA.issue(t, srvDir, "server")
	copyFile(t, newCA.caFile(), srvCA)
	if err := post(); err == nil {
		t.Fatal("a client trusting only the old CA still verified the server after its rotation")
	}
	// The client's files follow, and its next connection works again.
	newCA.issue(t, cliDir, "client")
	copyFile(t, newCA.caFile(), cliCA)
	if err := post(); err != nil {
		t.Fatalf("after both rotated: %v", err)
	}

	// A bad certificate file keeps the last good one, and is logged.
	if err := os.WriteFile(srvCert, []byte("garbage\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := post(); err != nil {
		t.Fatalf("with a bad server certificate file: %v (want the last good one in use)", err)
	}
	if !strings.Contains(log.String(), "cannot be loaded; keeping the previous one") {
		t.Errorf("no reload error in the log:\n%s", log.String())
	}
}

type statusError struct{ code int }

func (e *statusError) Error() string { return http.StatusText(e.code) }

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	tmp := to + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, to); err != nil {
		t.Fatal(err)
	}
}

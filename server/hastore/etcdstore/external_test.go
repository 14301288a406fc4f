package etcdstore_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/jobplane/jobplane/server/hastore/etcdmember"
	"github.com/jobplane/jobplane/server/hastore/etcdstore"
)

// testCA is a certificate authority made for one test; its keys live in
// the test's temporary directory only.
type testCA struct {
	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	File string // the CA certificate, PEM
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &testCA{dir: t.TempDir(), cert: cert, key: key}
	ca.File = ca.write(t, name+"-ca.pem", "CERTIFICATE", der)
	return ca
}

func (ca *testCA) write(t *testing.T, name, kind string, der []byte) string {
	t.Helper()
	path := filepath.Join(ca.dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// issue signs a certificate for name (a server's on 127.0.0.1, or a
// client's) and returns its certificate and key files.
func (ca *testCA) issue(t *testing.T, name string, server bool) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return ca.write(t, name+".pem", "CERTIFICATE", der), ca.write(t, name+"-key.pem", "EC PRIVATE KEY", keyDER)
}

// externalEtcd is a real etcd server, as an operator would run it apart
// from jobplane: client TLS with client certificates required, and user
// authentication enabled, with a user "jobplane" (password "secret")
// allowed to read and write under prefix only.
type externalEtcd struct {
	endpoint string
	ca       *testCA
	certFile string // a client certificate the server accepts
	keyFile  string
}

func startExternalEtcd(t *testing.T, prefix string) *externalEtcd {
	t.Helper()
	ca := newTestCA(t, "etcd")
	serverCert, serverKey := ca.issue(t, "server", true)
	clientCert, clientKey := ca.issue(t, "client", false)

	ec := embed.NewConfig()
	ec.Dir = t.TempDir()
	ec.TickMs, ec.ElectionMs = 10, 100
	clientURL := url.URL{Scheme: "https", Host: freeAddr(t)}
	peerURL := url.URL{Scheme: "http", Host: freeAddr(t)}
	ec.ListenClientUrls, ec.AdvertiseClientUrls = []url.URL{clientURL}, []url.URL{clientURL}
	ec.ListenPeerUrls, ec.AdvertisePeerUrls = []url.URL{peerURL}, []url.URL{peerURL}
	ec.InitialCluster = ec.InitialClusterFromName(ec.Name)
	ec.ClientTLSInfo.CertFile, ec.ClientTLSInfo.KeyFile = serverCert, serverKey
	ec.ClientTLSInfo.TrustedCAFile = ca.File
	ec.ClientTLSInfo.ClientCertAuth = true
	ec.BcryptCost = 4 // the least: under the race detector etcd's default takes seconds per login
	ec.Logger = "zap"
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(ec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		t.Fatal("external etcd not ready")
	}
	x := &externalEtcd{endpoint: clientURL.String(), ca: ca, certFile: clientCert, keyFile: clientKey}

	// The operator's setup: root, a role for jobplane's prefix, its user,
	// and authentication on.
	tlsCfg, err := etcdmember.ClientConfig{Endpoints: []string{x.endpoint}, CACertFile: ca.File, CertFile: clientCert, KeyFile: clientKey}.TLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{x.endpoint}, TLS: tlsCfg, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	steps := []func() error{
		func() error { _, err := c.UserAdd(ctx, "root", "rootpw"); return err },
		func() error { _, err := c.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := c.RoleAdd(ctx, "jobplane"); return err },
		func() error {
			_, err := c.RoleGrantPermission(ctx, "jobplane", prefix, clientv3.GetPrefixRangeEnd(prefix), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := c.UserAdd(ctx, "jobplane", "secret"); return err },
		func() error { _, err := c.UserGrantRole(ctx, "jobplane", "jobplane"); return err },
		func() error { _, err := c.AuthEnable(ctx); return err },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("auth setup step %d: %v", i, err)
		}
	}
	return x
}

// The store runs on an external etcd with TLS, client certificates and
// user authentication; without a client certificate, with a wrong
// password, or outside its permitted prefix, Open fails with an error
// that says why.
func TestOpenExternalTLSAndAuth(t *testing.T) {
	const prefix = "/team-a/"
	x := startExternalEtcd(t, prefix)
	good := etcdstore.OpenConfig{
		Endpoints: []string{x.endpoint}, Prefix: prefix,
		CACertFile: x.ca.File, CertFile: x.certFile, KeyFile: x.keyFile,
		Username: "jobplane", Password: "secret",
		DialTimeout: 5 * time.Second, Logger: quietLogger(),
	}
	otherCA := newTestCA(t, "other")
	strangerCert, strangerKey := otherCA.issue(t, "stranger", false)

	for _, tc := range []struct {
		name string
		edit func(*etcdstore.OpenConfig)
		want []string // in the error
	}{
		{"no client certificate", func(c *etcdstore.OpenConfig) { c.CertFile, c.KeyFile = "", "" }, []string{x.endpoint, "certificate required"}},
		{"certificate of another CA", func(c *etcdstore.OpenConfig) { c.CertFile, c.KeyFile = strangerCert, strangerKey }, []string{x.endpoint, "unknown certificate authority"}},
		{"server not trusted", func(c *etcdstore.OpenConfig) { c.CACertFile = otherCA.File }, []string{x.endpoint, "certificate signed by unknown authority"}},
		{"wrong password", func(c *etcdstore.OpenConfig) { c.Password = "guess" }, []string{`user "jobplane"`, "authentication failed"}},
		{"no user", func(c *etcdstore.OpenConfig) { c.Username, c.Password = "", "" }, []string{x.endpoint, "permission denied"}},
		{"outside the permitted prefix", func(c *etcdstore.OpenConfig) { c.Prefix = "/team-b/" }, []string{"/team-b/", "permission denied"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := good
			tc.edit(&cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			s, err := etcdstore.Open(ctx, cfg)
			if err == nil {
				s.Close()
				t.Fatal("Open succeeded, want an error")
			}
			t.Logf("Open: %v", err)
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Open: %v\nwant an error that mentions %q", err, want)
				}
			}
		})
	}

	t.Run("right certificate and password", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s, err := etcdstore.Open(ctx, good)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		defer s.Close()
		leadAndPut(t, s, "secure")
		hasPlans(t, s, "the external etcd", "secure")
	})
}

func TestOpenConfigValidateClientSecurity(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.pem")
	ep := []string{"https://127.0.0.1:2379"}
	for _, tc := range []struct {
		name string
		cfg  etcdstore.OpenConfig
		want string
	}{
		{"certificate without key", etcdstore.OpenConfig{Endpoints: ep, CertFile: "c.pem"}, "needs its key"},
		{"key without certificate", etcdstore.OpenConfig{Endpoints: ep, KeyFile: "k.pem"}, "needs its key"},
		{"password without user", etcdstore.OpenConfig{Endpoints: ep, Password: "p"}, "needs a user name"},
		{"user without password", etcdstore.OpenConfig{Endpoints: ep, Username: "u"}, "has no password"},
		{"TLS on a data directory", etcdstore.OpenConfig{DataDir: dir, CACertFile: "ca.pem"}, "external cluster (endpoints) only"},
		{"auth on a data directory", etcdstore.OpenConfig{DataDir: dir, Username: "u", Password: "p"}, "external cluster (endpoints) only"},
		{"TLS on a plain endpoint", etcdstore.OpenConfig{Endpoints: []string{"http://127.0.0.1:2379"}, CACertFile: "ca.pem"}, "use https://"},
		{"not a URL", etcdstore.OpenConfig{Endpoints: []string{"ftp://h:1"}}, "want an http:// or https:// URL"},
		{"both", etcdstore.OpenConfig{Endpoints: ep, DataDir: dir}, "exactly one"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate: %v, want an error with %q", err, tc.want)
			}
		})
	}
	// Files are read before anything connects.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := etcdstore.Open(ctx, etcdstore.OpenConfig{Endpoints: ep, CACertFile: missing, Logger: quietLogger()})
	if err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("Open with an unreadable CA file: %v, want an error naming it", err)
	}
}

package etcdstore_test

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/jobplane/jobplane/server/hastore/etcdmember"
	"github.com/jobplane/jobplane/server/internal/certs"
)

// issue makes a CA in dir and a certificate of it for each name, valid for
// the loopback address; it returns the CA file and each name's files.
func issue(t *testing.T, dir string, names ...string) (caFile string, tlsOf map[string]etcdmember.PeerTLS) {
	t.Helper()
	ca, err := certs.NewCA("jobplane test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.Write(dir); err != nil {
		t.Fatal(err)
	}
	caFile = filepath.Join(dir, certs.CACertFile)
	tlsOf = map[string]etcdmember.PeerTLS{}
	for _, name := range names {
		certPEM, keyPEM, err := ca.Issue(name, []string{"127.0.0.1"}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		certFile, keyFile, err := certs.WriteKeyPair(dir, name, certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		tlsOf[name] = etcdmember.PeerTLS{CertFile: certFile, KeyFile: keyFile, CAFile: caFile}
	}
	return caFile, tlsOf
}

// Members with peer TLS form a cluster over https:// peer URLs and serve
// the store; their peer listeners take only a peer whose certificate the
// cluster's CA signed: no certificate, or one of another CA, is refused
// at the handshake.
func TestPeerTLS(t *testing.T) {
	t.Parallel()
	caFile, tlsOf := issue(t, t.TempDir(), "a", "b", "c", "stranger-of-the-ca")
	_, foreign := issue(t, t.TempDir(), "stranger")
	nodes := newNodes(t, func(n *node) string { return "https://" + n.peerAddr }, "a", "b", "c")
	for _, n := range nodes {
		n.peerTLS = tlsOf[n.name]
	}
	startCluster(t, nodes...)
	leadAndPut(t, nodes[0].store, "over-tls")
	if got := memberNames(t, etcdClient(t, nodes[2].endpoint())); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("members %v, want a, b, c", got)
	}

	pem, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	peerGet := func(client *tls.Certificate) error {
		cfg := &tls.Config{RootCAs: roots}
		if client != nil {
			cfg.Certificates = []tls.Certificate{*client}
		}
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 10 * time.Second}
		defer c.CloseIdleConnections()
		resp, err := c.Get("https://" + nodes[1].peerAddr + "/members")
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	}
	load := func(p etcdmember.PeerTLS) *tls.Certificate {
		c, err := tls.LoadX509KeyPair(p.CertFile, p.KeyFile)
		if err != nil {
			t.Fatal(err)
		}
		return &c
	}
	if err := peerGet(load(tlsOf["stranger-of-the-ca"])); err != nil {
		t.Fatalf("a peer with a certificate of the cluster's CA was refused: %v", err)
	}
	if err := peerGet(nil); err == nil {
		t.Error("the peer listener took a connection without a certificate")
	}
	if err := peerGet(load(foreign["stranger"])); err == nil {
		t.Error("the peer listener took a certificate of another CA")
	}
	plain := &http.Client{Timeout: 10 * time.Second}
	if resp, err := plain.Get("http://" + nodes[1].peerAddr + "/members"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("the peer listener answered plain HTTP")
		}
	}
}

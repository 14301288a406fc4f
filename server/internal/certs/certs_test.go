package certs_test

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jobplane/jobplane/server/internal/certs"
)

// A CA written and loaded again issues certificates that verify against
// it as servers for their hosts and as clients; a second CA is not
// written over the first.
func TestIssueVerifies(t *testing.T) {
	dir := t.TempDir()
	ca, err := certs.NewCA("test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.Write(dir); err != nil {
		t.Fatal(err)
	}
	if err := ca.Write(dir); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Errorf("writing a CA over another: %v, want refused", err)
	}
	if fi, err := os.Stat(filepath.Join(dir, certs.CAKeyFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("CA key file: %v, %v; want mode 0600", fi, err)
	}
	loaded, err := certs.LoadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := loaded.Issue("host1", []string{"host1", "127.0.0.2"}, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, err := certs.WriteKeyPair(t.TempDir(), "host1", certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	for _, tc := range []struct {
		name  string
		opts  x509.VerifyOptions
		valid bool
	}{
		{"server by name", x509.VerifyOptions{DNSName: "host1", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, true},
		{"server by address", x509.VerifyOptions{DNSName: "127.0.0.2", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, true},
		{"client", x509.VerifyOptions{KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, true},
		{"another host", x509.VerifyOptions{DNSName: "host2", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, false},
	} {
		tc.opts.Roots = roots
		_, err := leaf.Verify(tc.opts)
		if (err == nil) != tc.valid {
			t.Errorf("%s: Verify = %v, want valid %v", tc.name, err, tc.valid)
		}
	}
	// Another CA does not verify it.
	other, err := certs.NewCA("other", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	otherRoots := x509.NewCertPool()
	otherRoots.AddCert(other.Cert)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: otherRoots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
		t.Error("a certificate verified against another CA")
	}
	// Validity is capped by the CA's.
	if leaf.NotAfter.After(ca.Cert.NotAfter) {
		t.Errorf("certificate valid until %v, past its CA's %v", leaf.NotAfter, ca.Cert.NotAfter)
	}
	if _, _, err := loaded.Issue("x", nil, time.Hour); err == nil {
		t.Error("Issue without hosts succeeded")
	}
}

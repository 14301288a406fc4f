package sdk_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"testing"
	"time"

	"github.com/jobplane/jobplane/sdk"
)

// tlsFront serves the standalone server behind TLS with HTTP/2 by ALPN
// (as a load balancer in front of a cluster would), and returns its URL
// and the CA that signed its certificate.
func tlsFront(t *testing.T) (string, *x509.CertPool) {
	t.Helper()
	target, err := url.Parse(serverURL)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	rp.Transport = &http.Transport{Protocols: &p}
	rp.FlushInterval = -1
	srv := httptest.NewUnstartedServer(rp)
	srv.EnableHTTP2 = true
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the untrusted client's handshake failure
	srv.StartTLS()
	t.Cleanup(srv.Close)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	return srv.URL, pool
}

// The Client speaks TLS to https:// URLs, with HTTP/2 by ALPN or HTTP/1.1,
// and gives up at once on a certificate it cannot trust.
func TestTLS(t *testing.T) {
	front, pool := tlsFront(t)
	for _, tc := range []struct {
		name string
		opts []sdk.Option
	}{
		{"connect-h2", nil},
		{"grpc-h2", []sdk.Option{sdk.WithProtocol(sdk.ProtocolGRPC)}},
		{"connect-http1", []sdk.Option{sdk.WithHTTP1()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(t, []string{front}, append(tc.opts, sdk.WithTLSConfig(&tls.Config{RootCAs: pool}))...)
			ctx := testContext(t, 30*time.Second)
			res, err := c.Execute(ctx, sleepGraph("tls", 1, time.Millisecond))
			if err != nil || res.GetStatus() != finished {
				t.Fatalf("Execute over TLS: %v, %v", res, err)
			}
		})
	}
	c := newClient(t, []string{front})
	start := time.Now()
	_, err := c.Cluster(testContext(t, 30*time.Second))
	if err == nil || !isCertError(err) {
		t.Fatalf("an untrusted certificate: %v; want a certificate error", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatalf("an untrusted certificate was retried for %v", time.Since(start))
	}
}

func isCertError(err error) bool {
	var unknownCA x509.UnknownAuthorityError
	var verify *tls.CertificateVerificationError
	return errors.As(err, &unknownCA) || errors.As(err, &verify)
}

package worker_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"testing"

	"github.com/jobplane/jobplane/sdk/internal/servertest"
	"github.com/jobplane/jobplane/sdk/worker"
)

// A worker finds the cluster through an https:// Server that speaks only
// HTTP/1.1 (a TLS front), with the TLSConfig it is given.
func TestServerBehindTLSFront(t *testing.T) {
	c := servertest.Start(t)
	target, err := url.Parse(c.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.FlushInterval = -1 // ObserveLeader is a stream
	upstream := &http.Transport{}
	proxy.Transport = upstream
	front := httptest.NewUnstartedServer(proxy)
	front.EnableHTTP2 = false
	front.StartTLS()
	t.Cleanup(func() {
		front.CloseClientConnections()
		front.Close()
		upstream.CloseIdleConnections()
	})
	roots := x509.NewCertPool()
	roots.AddCert(front.Certificate())

	w := newWorker(t, worker.Config{Server: front.URL, TLSConfig: &tls.Config{RootCAs: roots}, ID: "w-tls"})
	w.Register("through-tls", func(context.Context, worker.Task) error { return nil })
	start(t, w)
	if te := c.WaitTaskExecutor(t, "through-tls"); te.GetTaskExecutorId() != "w-tls" {
		t.Errorf("registered TaskExecutor %q, want w-tls", te.GetTaskExecutorId())
	}
}

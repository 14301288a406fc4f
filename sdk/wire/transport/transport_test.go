package transport_test

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/jobplane/jobplane/sdk/wire/transport"
)

// A Transport speaks h2c to http:// URLs, and TLS (HTTP/2 where offered) to
// https:// ones, such as an advertised TLS-terminating proxy.
func TestBySchemes(t *testing.T) {
	proto := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.Proto) })

	plain := httptest.NewUnstartedServer(proto)
	plain.Config.Protocols = transport.ServerProtocols()
	plain.Start()
	defer plain.Close()
	secure := httptest.NewUnstartedServer(proto)
	secure.EnableHTTP2 = true
	secure.StartTLS()
	defer secure.Close()

	roots := x509.NewCertPool()
	roots.AddCert(secure.Certificate())
	c := transport.NewClient(&tls.Config{RootCAs: roots})
	defer c.CloseIdleConnections()

	for _, tc := range []struct{ url, want string }{
		{plain.URL, "HTTP/2.0"},
		{secure.URL, "HTTP/2.0"},
	} {
		resp, err := c.Get(tc.url)
		if err != nil {
			t.Fatalf("GET %s: %v", tc.url, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != tc.want || resp.TLS == nil != (tc.url == plain.URL) {
			t.Errorf("GET %s: served over %q (TLS %v), want %q", tc.url, body, resp.TLS != nil, tc.want)
		}
	}
}

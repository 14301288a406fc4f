package endpoint

import (
	"errors"
	"net/http"
	"slices"
	"strings"

	"connectrpc.com/connect"
)

// requireClientCert answers a call to one of services, unless
// Config.PublicServices names it, UNAUTHENTICATED when the connection
// carries no client certificate that Config.ClientCAFile's authorities
// verified (the handshake already refused one they did not sign). Without
// ClientCAFile it returns next.
func (e *Endpoint) requireClientCert(services []string, next http.Handler) http.Handler {
	if e.caPool == nil {
		return next
	}
	guarded := make(map[string]bool)
	for _, s := range services {
		if !slices.Contains(e.cfg.PublicServices, s) {
			guarded[s] = true
		}
	}
	ew := connect.NewErrorWriter()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		service, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
		if guarded[service] && (r.TLS == nil || len(r.TLS.VerifiedChains) == 0) {
			e.log.Warn("refused a call without a client certificate", "service", service, "remote", r.RemoteAddr)
			_ = ew.Write(w, r, connect.NewError(connect.CodeUnauthenticated, errNoClientCert))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// errNoClientCert is the answer to a call to a cluster service without a
// verified client certificate.
var errNoClientCert = errors.New("endpoint: this service answers only callers with a client certificate signed by the cluster's certificate authority")

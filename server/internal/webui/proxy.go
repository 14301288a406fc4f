package webui

import (
	"context"
	"errors"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"

	"connectrpc.com/connect"
)

// LeaderPath is where a JobManager passes the dashboard's calls on to the
// cluster's leader: POST LeaderPath + "jobplane.v1.DispatcherService/M"
// is the leader's DispatcherService method M. A standby's page reads the
// leader's data through it, from its own origin (the page's policy lets it
// call nothing else, and the API serves no cross-origin calls).
const LeaderPath = "/ui/leader/"

// service is the only service passed on: the public one, which checks
// the caller's credentials itself (the Authorization header goes along).
const service = "jobplane.v1.DispatcherService/"

// leaderLookupTimeout bounds the read of the leader's address.
const leaderLookupTimeout = 5 * time.Second

// LeaderProxy passes POST LeaderPath + service + method on to the public
// API of the process that leader names, through client: the request as
// it came (the caller's Authorization included), the answer as it comes
// (streams flushed as they go). leader returns the leader's public URL, or
// "" when none is known. The proxy adds no authority of its own: the
// public API does not look at the client certificate client presents,
// and the leader checks the caller's token as it checks any client's. Anything else under
// LeaderPath is 404; no known leader, or one that does not answer, is a
// Connect error with code unavailable.
func LeaderProxy(leader func(context.Context) (string, error), client connect.HTTPClient) http.Handler {
	type targetKey struct{}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			target := pr.In.Context().Value(targetKey{}).(*url.URL)
			procedure := strings.TrimPrefix(pr.In.URL.Path, LeaderPath)
			pr.Out.URL.Scheme, pr.Out.URL.Host = target.Scheme, target.Host
			pr.Out.URL.Path, pr.Out.URL.RawPath = strings.TrimSuffix(target.Path, "/")+"/"+procedure, ""
			pr.Out.URL.RawQuery = pr.In.URL.RawQuery
			pr.Out.Host = target.Host
			pr.Out.RequestURI = ""
			pr.SetXForwarded()
		},
		Transport:     roundTripper{client},
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			unavailable(w, r, "the leader did not answer: "+err.Error())
		},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		procedure := strings.TrimPrefix(r.URL.Path, LeaderPath)
		method, ok := strings.CutPrefix(procedure, service)
		if r.Method != http.MethodPost || !ok || method == "" || strings.Contains(method, "/") {
			http.NotFound(w, r)
			return
		}
		lctx, cancel := context.WithTimeout(r.Context(), leaderLookupTimeout)
		addr, err := leader(lctx)
		cancel()
		switch {
		case err != nil:
			unavailable(w, r, "the leader cannot be read: "+err.Error())
			return
		case addr == "":
			unavailable(w, r, "no leader is known; retry")
			return
		}
		target, err := url.Parse(addr)
		if err != nil || (target.Scheme != "http" && target.Scheme != "https") || target.Host == "" {
			unavailable(w, r, "the leader's address "+addr+" is not a URL")
			return
		}
		rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), targetKey{}, target)))
	})
}

// roundTripper carries the proxy's requests with a Connect HTTP client,
// the one the JobManager calls the cluster's processes with (its TLS
// authorities, and HTTP/2 in the clear where it speaks it).
type roundTripper struct{ c connect.HTTPClient }

func (t roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return t.c.Do(r) }

// errorWriter writes an error in the protocol of the call it answers.
var errorWriter = connect.NewErrorWriter()

// unavailable answers r with a Connect error of code unavailable, in
// r's protocol (a unary Connect call's is HTTP 503 and a JSON body).
func unavailable(w http.ResponseWriter, r *http.Request, msg string) {
	_ = errorWriter.Write(w, r, connect.NewError(connect.CodeUnavailable, errors.New(msg)))
}

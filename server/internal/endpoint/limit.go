package endpoint

import (
	"fmt"
	"net/http"
	"strconv"

	"connectrpc.com/connect"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
	"github.com/jobplane/jobplane/server/internal/telemetry"
)

// handlerOptions are the options every handler on the endpoint is built
// with. The read limit is applied again in the handler, after limitBody,
// because only connect sees a message once decompressed: a gzip body well
// under the limit on the wire can inflate far beyond it. The send limit
// turns an answer that would be too large into RESOURCE_EXHAUSTED instead
// of sending it. Answers under CompressMinBytes go uncompressed, even to a
// client that accepts gzip: connect would otherwise compress every one.
// Every error a handler answers carries its ErrorInfo (apierror.Complete).
// Every call is traced and measured (telemetry.RPC), continuing the
// caller's trace, and refusals for a stale fencing token are counted
// (telemetry.Fencing); both see the completed error.
func (e *Endpoint) handlerOptions() []connect.HandlerOption {
	return []connect.HandlerOption{
		connect.WithReadMaxBytes(int(e.cfg.MaxRequestBytes)),
		connect.WithSendMaxBytes(int(e.cfg.MaxResponseBytes)),
		connect.WithCompressMinBytes(CompressMinBytes),
		connect.WithInterceptors(telemetry.RPC(), telemetry.Fencing(), apierror.Interceptor()),
	}
}

// limitBody refuses request bodies over limit bytes before a handler pays
// for them. A body that declares a larger Content-Length is answered at
// once, unread; any other body is cut off once it passes the limit, so a
// body without a declared length (gRPC's, or a chunked upload) costs at
// most the limit.
//
// Both answers are RESOURCE_EXHAUSTED in the client's own protocol
// (Connect, gRPC or gRPC-Web), as connect answers a message over its read
// limit: the early one through connect's ErrorWriter, the late one because
// connect maps the http.MaxBytesError of a cut-off body to that code.
func limitBody(limit int64, next http.Handler) http.Handler {
	refuse := connect.NewErrorWriter()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > limit {
			err := apierror.New(jobplanev1.ErrorReason_ERROR_REASON_REQUEST_TOO_LARGE,
				fmt.Sprintf("request body of %d bytes is over the limit of %d bytes", r.ContentLength, limit),
				map[string]string{"limit_bytes": strconv.FormatInt(limit, 10)})
			if refuse.IsSupported(r) {
				_ = refuse.Write(w, r, err)
			} else {
				http.Error(w, err.Message(), http.StatusRequestEntityTooLarge)
			}
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, limit)
		next.ServeHTTP(w, r)
	})
}

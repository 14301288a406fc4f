package endpoint

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"connectrpc.com/connect"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
	"github.com/jobplane/jobplane/server/internal/telemetry"
	"github.com/jobplane/jobplane/server/internal/unknownfield"
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
//
// The read limit is not connect's (WithReadMaxBytes): connect answers a
// message over it with an error of its own, without the ErrorInfo every
// jobplane error carries, and before any interceptor can add it. The
// limit is enforced by the readers under connect instead, whose errors it
// passes on as they are: limitBody's on the wire, and the gzip
// decompressor's (limitedGzip) once decompressed. Likewise a body that
// cannot be decoded is refused with its BadRequest detail
// (unknownfield.DecodeOptions).
func (e *Endpoint) handlerOptions() []connect.HandlerOption {
	limit := e.cfg.MaxRequestBytes
	return append([]connect.HandlerOption{
		connect.WithCompression("gzip",
			func() connect.Decompressor { return &limitedGzip{limit: limit} },
			func() connect.Compressor { return gzip.NewWriter(io.Discard) }),
		connect.WithSendMaxBytes(int(e.cfg.MaxResponseBytes)),
		connect.WithCompressMinBytes(CompressMinBytes),
		connect.WithInterceptors(telemetry.RPC(), telemetry.Fencing(), apierror.Interceptor()),
	}, unknownfield.DecodeOptions()...)
}

// tooLarge is the refusal of a request over limit bytes.
func tooLarge(what string, limit int64) *connect.Error {
	return apierror.New(jobplanev1.ErrorReason_ERROR_REASON_REQUEST_TOO_LARGE,
		fmt.Sprintf("%s is over the limit of %d bytes", what, limit),
		map[string]string{"limit_bytes": strconv.FormatInt(limit, 10)})
}

// limitedGzip is connect's gzip decompressor, except that it fails with
// REQUEST_TOO_LARGE once a message inflates past limit bytes.
type limitedGzip struct {
	gzip.Reader
	limit, read int64
}

func (d *limitedGzip) Read(p []byte) (int, error) {
	n, err := d.Reader.Read(p)
	if d.read += int64(n); d.read > d.limit {
		return n, tooLarge("the decompressed request", d.limit)
	}
	return n, err
}

func (d *limitedGzip) Reset(r io.Reader) error {
	d.read = 0
	return d.Reader.Reset(r)
}

// limitBody refuses request bodies over limit bytes before a handler pays
// for them. A body that declares a larger Content-Length is answered at
// once, unread; any other body is cut off once it passes the limit, so a
// body without a declared length (gRPC's, or a chunked upload) costs at
// most the limit.
//
// Both answers are RESOURCE_EXHAUSTED (REQUEST_TOO_LARGE) in the client's
// own protocol (Connect, gRPC or gRPC-Web): the early one through
// connect's ErrorWriter, the late one as the body's read error, which
// connect answers as it is (limitedBody).
func limitBody(limit int64, next http.Handler) http.Handler {
	refuse := connect.NewErrorWriter()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > limit {
			err := tooLarge(fmt.Sprintf("request body of %d bytes", r.ContentLength), limit)
			if refuse.IsSupported(r) {
				_ = refuse.Write(w, r, err)
			} else {
				http.Error(w, err.Message(), http.StatusRequestEntityTooLarge)
			}
			return
		}
		r.Body = limitedBody{http.MaxBytesReader(w, r.Body, limit), limit}
		next.ServeHTTP(w, r)
	})
}

// limitedBody is a body cut off by http.MaxBytesReader (which also makes
// the server close the connection rather than read on), whose error once
// cut off is REQUEST_TOO_LARGE with its ErrorInfo: connect answers a
// reader's *connect.Error as it is.
type limitedBody struct {
	io.ReadCloser
	limit int64
}

func (b limitedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		return n, tooLarge("the request body", b.limit)
	}
	return n, err
}

package endpoint

import (
	"connectrpc.com/connect"

	"github.com/jobplane/jobplane/server/internal/telemetry"
)

// ClientOptions returns the connect options of every client that
// components build to call each other, over transport.NewClient: messages under
// CompressMinBytes are never compressed, and every call is traced and
// measured (telemetry.RPC), carrying the caller's trace context.
//
// Requests are sent uncompressed, as connect does by default: between
// components the CPU that gzip costs is dearer than the bytes it saves. The
// threshold holds should a caller add connect.WithSendGzip. Answers are
// compressed by the handler that sends them, above the same threshold (see
// Endpoint.Mount); these clients accept gzip, as connect clients do.
func ClientOptions() []connect.ClientOption {
	return []connect.ClientOption{connect.WithCompressMinBytes(CompressMinBytes), connect.WithInterceptors(telemetry.RPC())}
}

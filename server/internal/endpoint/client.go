package endpoint

import (
	"net/http"
	"time"

	"connectrpc.com/connect"
)

// MaxIdleConnsPerHost is how many idle connections NewClient's clients
// keep to each process they call, for the calls in flight at once between
// two processes at a burst.
const MaxIdleConnsPerHost = 256

// NewClient returns the HTTP client components use to call each other:
// HTTP/1.1 over kept-alive connections, one per call in flight. Between two
// processes of a cluster it answers sooner and costs less CPU than h2c
// (measured by make bench, row 3 and the JobManager's CPU per ack in row
// 1a): a call and its answer pass through fewer goroutines on each side.
func NewClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		MaxIdleConnsPerHost: MaxIdleConnsPerHost,
		IdleConnTimeout:     90 * time.Second,
	}}
}

// ServerProtocols returns the protocols an endpoint serves on one port:
// HTTP/1.1, and unencrypted HTTP/2 for clients with prior knowledge.
func ServerProtocols() *http.Protocols {
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	return &p
}

// ClientOptions returns the connect options of every client that
// components build to call each other, over NewClient: messages under
// CompressMinBytes are never compressed.
//
// Requests are sent uncompressed, as connect does by default: between
// components the CPU that gzip costs is dearer than the bytes it saves. The
// threshold holds should a caller add connect.WithSendGzip. Answers are
// compressed by the handler that sends them, above the same threshold (see
// Endpoint.Mount); these clients accept gzip, as connect clients do.
func ClientOptions() []connect.ClientOption {
	return []connect.ClientOption{connect.WithCompressMinBytes(CompressMinBytes)}
}

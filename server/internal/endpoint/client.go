package endpoint

import (
	"net/http"

	"connectrpc.com/connect"
)

// NewClient returns the HTTP client components use to call each other:
// unencrypted HTTP/2 with prior knowledge, so that every call between two
// processes shares one connection.
func NewClient() *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: &p}}
}

// ServerProtocols returns the protocols an endpoint serves on one port:
// HTTP/1.1, and unencrypted HTTP/2 for NewClient's prior knowledge.
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

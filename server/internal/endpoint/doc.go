// Package endpoint serves every RPC service of a jobplane process on one
// listener: Connect, gRPC and gRPC-Web, over HTTP/1.1 and unencrypted
// HTTP/2 (h2c), with gRPC health checking and server reflection mounted for
// the services it serves.
//
// It owns the listener, the http.Server, the limits every request and
// answer is held to (Config.MaxRequestBytes, Config.MaxResponseBytes), the
// size under which nothing is compressed (CompressMinBytes, for handlers
// and for the clients of ClientOptions), and nothing else: components mount
// their handlers before Run, built with the endpoint's handler options,
// and the endpoint never interprets a request beyond its size.
package endpoint

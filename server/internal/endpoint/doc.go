// Package endpoint serves every RPC service of a jobplane process on one
// listener: Connect, gRPC and gRPC-Web, over HTTP/1.1 and unencrypted
// HTTP/2 (h2c), with gRPC health checking and server reflection mounted for
// the services it serves.
//
// It owns the listener and the http.Server and nothing else: components
// mount their handlers before Run, and the endpoint never interprets a
// request itself.
package endpoint

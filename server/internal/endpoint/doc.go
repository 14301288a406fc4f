// Package endpoint serves every RPC service of a jobplane process on one
// listener: Connect, gRPC and gRPC-Web, over HTTP/1.1 and unencrypted
// HTTP/2 (h2c), or over TLS (HTTP/2 or HTTP/1.1 by ALPN) when given a
// certificate, with gRPC health checking and server reflection mounted for
// the services it serves.
//
// Health: the process as a whole (the service name "") is SERVING from
// Run until shutdown begins; a mounted service is SERVING unless its
// component says otherwise with SetServing (a JobManager's leader-only
// services are NOT_SERVING on a standby); shutdown turns every name
// NOT_SERVING before the listener closes, for good.
//
// TLS files (Config.TLSCertFile, Config.ClientCAFile, and a client's
// ClientFiles) are read again when they change, at the next handshake.
// With Config.ClientCAFile the endpoint asks for client certificates and
// answers the services that Config.PublicServices does not name only to
// callers with a verified one (mutual TLS between a cluster's
// components). SetCluster splits a process into two surfaces: the public
// API on one endpoint, the cluster protocol on another.
//
// It owns the listener, the http.Server, the limits every request and
// answer is held to (Config.MaxRequestBytes, Config.MaxResponseBytes), the
// size under which nothing is compressed (CompressMinBytes, for handlers
// and for the clients of ClientOptions), and nothing else: components mount
// their handlers before Run, built with the endpoint's handler options,
// and the endpoint never interprets a request beyond its size.
package endpoint

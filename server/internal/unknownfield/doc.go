// Package unknownfield makes a Connect service refuse requests that carry
// fields its schema does not know, in binary and in JSON alike, with
// INVALID_ARGUMENT and one google.rpc.BadRequest field violation per
// unknown field, whose path names it: `job_graph.config.restartStrateg`
// for a misspelt JSON key, `job_graph.config.99` for an unknown field
// number in binary (the number is all the wire says of it; `protoc
// --decode_raw` names fields the same way).
//
// Protobuf's binary decoder keeps unknown fields, and connect's JSON codec
// drops them, so a misspelt field silently meant "unset". This package
// swaps in a JSON codec that records what it does not know as an unknown
// field of the request (see jsonCodec), and an interceptor that refuses
// any request with unknown fields: one check, one error shape, for both
// encodings.
//
// It belongs on the public API only. Internal services stay lenient, so
// that processes of different versions keep talking during a rolling
// upgrade.
package unknownfield

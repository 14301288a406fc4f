package unknownfield

import "connectrpc.com/connect"

// NewJSONCodec returns the JSON codec HandlerOptions installs, for tests.
func NewJSONCodec() connect.Codec { return &jsonCodec{name: "json"} }

// Malformed is malformed, for tests.
func Malformed(msg any) error { return malformed(msg) }

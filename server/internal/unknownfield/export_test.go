package unknownfield

import "connectrpc.com/connect"

// NewJSONCodec returns the JSON codec HandlerOptions installs, for tests.
func NewJSONCodec() connect.Codec { return &jsonCodec{name: "json"} }

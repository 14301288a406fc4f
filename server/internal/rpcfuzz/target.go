package rpcfuzz

import (
	"context"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Target is a service under fuzzing: a fuzz function picks a procedure
// and a protocol from two bytes, and sends a body (see Check).
type Target struct {
	// Handler serves the service.
	Handler http.Handler
	// Methods are the service's procedures.
	Methods protoreflect.MethodDescriptors
	// UnknownOK says the service accepts unknown fields (an internal
	// service, open to newer clients); otherwise a body holding one must
	// be refused.
	UnknownOK bool
	// Invalid reports whether a decoded request is one the service must
	// refuse with INVALID_ARGUMENT. Nil: none beyond those that do not
	// decode.
	Invalid func(proto.Message) bool
	// StreamTimeout bounds a server-streaming call (sent as its timeout
	// header), which may otherwise follow its subject for good. Default:
	// 5s. Unary calls get 5s.
	StreamTimeout time.Duration
}

// AddSeeds adds each seed request of each procedure to f in every
// protocol, as the arguments Check takes, and a few bodies that are
// wrong in every procedure.
func AddSeeds(f *testing.F, methods protoreflect.MethodDescriptors, seeds map[protoreflect.Name][]proto.Message) {
	for i := range methods.Len() {
		for _, m := range seeds[methods.Get(i).Name()] {
			bin, err := proto.Marshal(m)
			if err != nil {
				f.Fatal(err)
			}
			js, err := protojson.Marshal(m)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(uint8(i), uint8(ConnectProto), false, bin)
			f.Add(uint8(i), uint8(ConnectJSON), false, js)
			f.Add(uint8(i), uint8(GRPC), false, bin)
			f.Add(uint8(i), uint8(GRPC), true, Envelope(0, bin))
		}
		f.Add(uint8(i), uint8(ConnectJSON), false, []byte(`{"jobId": 7, "unknownField": true}`))
		f.Add(uint8(i), uint8(ConnectProto), false, []byte{0xff, 0xff})
		f.Add(uint8(i), uint8(GRPC), true, []byte{0, 0, 0, 0, 9, 1})
		f.Add(uint8(i), uint8(GRPC), true, []byte{})
	}
}

// Check sends one fuzzed call to the target and fails t unless the answer
// keeps the contract's promises: it is in its protocol, never has a code
// that says the server failed (Forbidden), is HTTP 5xx only with
// UNAVAILABLE, and is INVALID_ARGUMENT for a body that does not decode as
// the procedure's request, or that decodes to a request Invalid refuses.
// raw sends an enveloped call's body unframed (see Call.Raw).
func (tg Target) Check(t testing.TB, method, protocol uint8, raw bool, body []byte) {
	t.Helper()
	call := Call{
		Method: tg.Methods.Get(int(method) % tg.Methods.Len()), Protocol: Protocol(protocol) % NumProtocols,
		Body: body, Raw: raw, Timeout: 5 * time.Second,
	}
	if call.Streaming() && tg.StreamTimeout > 0 {
		call.Timeout = tg.StreamTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*call.Timeout)
	defer cancel()
	out, err := Do(ctx, tg.Handler, call)
	if err != nil {
		t.Fatalf("%s over %v (raw %v): %v", call.Path(), call.Protocol, raw, err)
	}
	if Forbidden(out.Code) || out.HTTPStatus >= 500 && out.Code != connect.CodeUnavailable {
		t.Fatalf("%s over %v (raw %v): %v", call.Path(), call.Protocol, raw, out)
	}
	msg := Decodes(call, tg.UnknownOK)
	if msg == nil && out.Code != connect.CodeInvalidArgument {
		t.Fatalf("%s over %v (raw %v): a body that does not decode got %v, want INVALID_ARGUMENT", call.Path(), call.Protocol, raw, out)
	}
	if msg != nil && tg.Invalid != nil && tg.Invalid(msg) && out.Code != connect.CodeInvalidArgument {
		t.Fatalf("%s over %v: the invalid request {%v} got %v, want INVALID_ARGUMENT", call.Path(), call.Protocol, msg, out)
	}
}

// Package rpcfuzz feeds arbitrary request bodies to a Connect service's
// handler, as fuzz targets do: any procedure of the service, in the
// Connect protocol (binary and JSON) or in gRPC framing, and reads back the
// code the handler answered with, whatever the protocol says it in. It
// also says whether a body decodes as the procedure's request at all
// (Decodes), so that a target can demand INVALID_ARGUMENT for every body
// that does not.
//
// It is test support: it drives an http.Handler in process through
// ServeHTTP, with no network, and must not be linked into servers.
package rpcfuzz

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// Protocol is how a request is put on the wire.
type Protocol int

// The protocols a Call may use. For a server-streaming procedure the
// Connect protocols use their streaming form (application/connect+proto
// and application/connect+json, enveloped bodies).
const (
	// ConnectProto is the Connect protocol with binary protobuf.
	ConnectProto Protocol = iota
	// ConnectJSON is the Connect protocol with JSON.
	ConnectJSON
	// GRPC is gRPC (binary protobuf, enveloped), over HTTP/2.
	GRPC
	// NumProtocols counts the protocols, for picking one from a fuzz
	// input's byte.
	NumProtocols
)

// String names the protocol.
func (p Protocol) String() string {
	switch p {
	case ConnectProto:
		return "connect+proto"
	case ConnectJSON:
		return "connect+json"
	case GRPC:
		return "grpc"
	}
	return "protocol(" + strconv.Itoa(int(p)) + ")"
}

// Call is one request to a procedure.
type Call struct {
	// Method is the procedure.
	Method protoreflect.MethodDescriptor
	// Protocol is how the request goes on the wire.
	Protocol Protocol
	// Body is the request message's encoding (binary or JSON, as Protocol
	// says). For enveloped requests (gRPC, Connect streaming) it is put
	// in one envelope, unless Raw is set.
	Body []byte
	// Raw sends Body as the whole request body of an enveloped request,
	// framed or not: what a broken or hostile client might send.
	Raw bool
	// Timeout, if positive, is sent as the protocol's timeout header
	// (Connect-Timeout-Ms or grpc-timeout), which bounds a stream that
	// would otherwise run until its job ends.
	Timeout time.Duration
}

// Streaming reports whether the call's procedure is server streaming.
func (c Call) Streaming() bool { return c.Method.IsStreamingServer() }

// enveloped reports whether the request body is a sequence of envelopes.
func (c Call) enveloped() bool { return c.Protocol == GRPC || c.Streaming() }

// Path is the URL path of the call's procedure.
func (c Call) Path() string {
	return "/" + string(c.Method.Parent().FullName()) + "/" + string(c.Method.Name())
}

// Outcome is how a handler answered a Call.
type Outcome struct {
	// HTTPStatus is the response's HTTP status.
	HTTPStatus int
	// Code is the RPC's code; zero (not a connect.Code) is OK.
	Code connect.Code
	// Message is the error message, if any.
	Message string
}

// OK reports whether the call succeeded.
func (o Outcome) OK() bool { return o.Code == 0 }

// String says the outcome.
func (o Outcome) String() string {
	if o.OK() {
		return fmt.Sprintf("HTTP %d, ok", o.HTTPStatus)
	}
	return fmt.Sprintf("HTTP %d, %v: %s", o.HTTPStatus, o.Code, o.Message)
}

// Do sends call to h with ctx and returns the outcome. It fails when the
// answer breaks its protocol (no code can be read from it): that is a
// finding too.
func Do(ctx context.Context, h http.Handler, call Call) (Outcome, error) {
	body := call.Body
	if call.enveloped() && !call.Raw {
		body = Envelope(0, body)
	}
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, call.Path(), bytes.NewReader(body))
	switch {
	case call.Protocol == GRPC:
		req.ProtoMajor, req.ProtoMinor, req.Proto = 2, 0, "HTTP/2.0"
		req.Header.Set("Content-Type", "application/grpc")
		req.Header.Set("Te", "trailers")
		if call.Timeout > 0 {
			req.Header.Set("Grpc-Timeout", strconv.FormatInt(call.Timeout.Milliseconds(), 10)+"m")
		}
	case call.Streaming():
		req.Header.Set("Content-Type", map[Protocol]string{ConnectProto: "application/connect+proto", ConnectJSON: "application/connect+json"}[call.Protocol])
		req.Header.Set("Connect-Protocol-Version", "1")
	default:
		req.Header.Set("Content-Type", map[Protocol]string{ConnectProto: "application/proto", ConnectJSON: "application/json"}[call.Protocol])
		req.Header.Set("Connect-Protocol-Version", "1")
	}
	if call.Protocol != GRPC && call.Timeout > 0 {
		req.Header.Set("Connect-Timeout-Ms", strconv.FormatInt(call.Timeout.Milliseconds(), 10))
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	resp := rec.Result()
	out := Outcome{HTTPStatus: resp.StatusCode}
	respBody := rec.Body.Bytes()
	switch {
	case call.Protocol == GRPC:
		status := resp.Trailer.Get("Grpc-Status")
		msg := resp.Trailer.Get("Grpc-Message")
		if status == "" { // trailers-only: in the headers
			status, msg = resp.Header.Get("Grpc-Status"), resp.Header.Get("Grpc-Message")
		}
		n, err := strconv.Atoi(status)
		if err != nil || n < 0 || n > 16 {
			return out, fmt.Errorf("rpcfuzz: gRPC answer without a valid grpc-status (%q), HTTP %d", status, resp.StatusCode)
		}
		out.Code, out.Message = connect.Code(n), msg
	case resp.StatusCode != http.StatusOK:
		var e struct {
			Code    connect.Code `json:"code"`
			Message string       `json:"message"`
		}
		if err := json.Unmarshal(respBody, &e); err != nil {
			return out, fmt.Errorf("rpcfuzz: HTTP %d with a body that is no Connect error (%q): %w", resp.StatusCode, respBody, err)
		}
		out.Code, out.Message = e.Code, e.Message
	case call.Streaming():
		end, err := endOfStream(respBody)
		if err != nil {
			return out, err
		}
		out.Code, out.Message = end.Error.Code, end.Error.Message
	}
	return out, nil
}

// endOfStream finds the end-of-stream message of a Connect streaming
// response body.
func endOfStream(b []byte) (end struct {
	Error struct {
		Code    connect.Code `json:"code"`
		Message string       `json:"message"`
	} `json:"error"`
}, err error) {
	for len(b) > 0 {
		if len(b) < 5 {
			return end, fmt.Errorf("rpcfuzz: a truncated envelope in the response: %q", b)
		}
		flags, n := b[0], binary.BigEndian.Uint32(b[1:5])
		if uint64(len(b)-5) < uint64(n) {
			return end, fmt.Errorf("rpcfuzz: an envelope promising %d bytes, %d left", n, len(b)-5)
		}
		msg := b[5 : 5+n]
		b = b[5+n:]
		if flags&2 != 0 {
			if err := json.Unmarshal(msg, &end); err != nil {
				return end, fmt.Errorf("rpcfuzz: end of stream %q: %w", msg, err)
			}
			return end, nil
		}
	}
	return end, fmt.Errorf("rpcfuzz: a stream without its end-of-stream message")
}

// Envelope frames msg in one envelope with flags.
func Envelope(flags byte, msg []byte) []byte {
	b := make([]byte, 5, 5+len(msg))
	b[0] = flags
	binary.BigEndian.PutUint32(b[1:5], uint32(len(msg)))
	return append(b, msg...)
}

// NewRequest returns a new, empty request message of the method, from the
// global registry (the generated package must be linked).
func NewRequest(md protoreflect.MethodDescriptor) (proto.Message, error) {
	mt, err := protoregistry.GlobalTypes.FindMessageByName(md.Input().FullName())
	if err != nil {
		return nil, err
	}
	return mt.New().Interface(), nil
}

// Decodes decodes call's body as its procedure's request: the envelope
// (if the call is enveloped and Raw) must be exactly one uncompressed
// message (an empty one is the zero message), and unless unknownOK no field may be unknown, at any depth (in
// JSON, unknown names are then dropped, as connect's codec does). It
// returns the message, or nil when the body does not decode; a server
// must answer INVALID_ARGUMENT to a nil.
func Decodes(call Call, unknownOK bool) proto.Message {
	body := call.Body
	if call.enveloped() && call.Raw {
		if len(body) < 5 || body[0] != 0 || uint64(len(body)-5) != uint64(binary.BigEndian.Uint32(body[1:5])) {
			return nil
		}
		body = body[5:]
	}
	msg, err := NewRequest(call.Method)
	if err != nil {
		return nil
	}
	if call.enveloped() && len(body) == 0 {
		// An empty envelope is the zero message, in every codec: that is
		// how connect-go reads it.
		return msg
	}
	if call.Protocol == ConnectJSON {
		err = protojson.UnmarshalOptions{DiscardUnknown: unknownOK}.Unmarshal(body, msg)
	} else {
		err = proto.Unmarshal(body, msg)
	}
	if err != nil || !unknownOK && HasUnknown(msg.ProtoReflect()) {
		return nil
	}
	return msg
}

// HasUnknown reports whether m or any message in it holds unknown fields.
func HasUnknown(m protoreflect.Message) bool {
	if len(m.GetUnknown()) > 0 {
		return true
	}
	found := false
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap():
			if fd.MapValue().Message() != nil {
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
					found = found || HasUnknown(mv.Message())
					return !found
				})
			}
		case fd.IsList():
			if fd.Message() != nil {
				for i := 0; i < v.List().Len() && !found; i++ {
					found = HasUnknown(v.List().Get(i).Message())
				}
			}
		case fd.Message() != nil:
			found = HasUnknown(v.Message())
		}
		return !found
	})
	return found
}

// Forbidden reports whether code must never answer a request, whatever
// its body: those that say the server failed, not the request.
func Forbidden(code connect.Code) bool {
	switch code {
	case connect.CodeInternal, connect.CodeUnknown, connect.CodeDataLoss, connect.CodeUnimplemented:
		return true
	}
	return false
}

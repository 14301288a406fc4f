package unknownfield

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/jobplane/jobplane/sdk/wire/apierror"
)

// DecodeOptions returns the codecs and the interceptor that make a
// handler refuse a request it cannot decode (bytes that are not the
// message's binary encoding, text that is not its JSON) with
// INVALID_ARGUMENT and a google.rpc.BadRequest, as every other refusal
// of a jobplane handler: connect wraps a codec's error as
// INVALID_ARGUMENT without details, and answers it before any
// interceptor runs. The codecs never fail: they leave the message empty
// and record why in it (see recordMalformed), and the interceptor, which
// runs before the handler, refuses it. Unknown fields are kept as
// protobuf keeps them (binary) or dropped (JSON): HandlerOptions, on the
// public API, refuses those on top. Every handler takes these options.
func DecodeOptions() []connect.HandlerOption {
	return []connect.HandlerOption{
		connect.WithCodec(binaryCodec{}),
		connect.WithCodec(&jsonCodec{name: "json", lenient: true}),
		connect.WithCodec(&jsonCodec{name: "json; charset=utf-8", lenient: true}),
		connect.WithInterceptors(malformedInterceptor{}),
	}
}

// malformedNumber is the field number under which the codecs record, in
// a request's top-level unknown fields, why they could not decode it
// (the description of a BadRequest field violation on the whole body).
// It is next to recordedNumber, far above any field a schema uses.
const malformedNumber = recordedNumber - 1

// recordMalformed empties m and records why it could not be decoded.
func recordMalformed(m proto.Message, why error) {
	proto.Reset(m)
	b := protowire.AppendTag(nil, malformedNumber, protowire.BytesType)
	m.ProtoReflect().SetUnknown(protowire.AppendString(b, why.Error()))
}

// malformed returns INVALID_ARGUMENT if the codec recorded that msg could
// not be decoded, or nil.
func malformed(msg any) error {
	m, ok := msg.(proto.Message)
	if !ok {
		return nil
	}
	for b := m.ProtoReflect().GetUnknown(); len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil
		}
		b = b[n:]
		if num == malformedNumber && typ == protowire.BytesType {
			why, vn := protowire.ConsumeString(b)
			if vn >= 0 {
				return apierror.BadRequest(apierror.Field{Description: "the request body cannot be decoded: " + why})
			}
		}
		vn := protowire.ConsumeFieldValue(num, typ, b)
		if vn < 0 {
			return nil
		}
		b = b[vn:]
	}
	return nil
}

// binaryCodec is connect's binary codec, except that a message it cannot
// decode is recorded rather than an error (see DecodeOptions).
type binaryCodec struct{}

func (binaryCodec) Name() string { return "proto" }

func (binaryCodec) Marshal(msg any) ([]byte, error) {
	m, ok := msg.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a protobuf message", msg)
	}
	return proto.Marshal(m)
}

func (binaryCodec) MarshalAppend(dst []byte, msg any) ([]byte, error) {
	m, ok := msg.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a protobuf message", msg)
	}
	return proto.MarshalOptions{}.MarshalAppend(dst, m)
}

func (binaryCodec) Unmarshal(data []byte, msg any) error {
	m, ok := msg.(proto.Message)
	if !ok {
		return fmt.Errorf("%T is not a protobuf message", msg)
	}
	if err := proto.Unmarshal(data, m); err != nil {
		recordMalformed(m, err)
	}
	return nil
}

// malformedInterceptor refuses the requests that a codec recorded as
// malformed, before the handler sees them.
type malformedInterceptor struct{}

func (malformedInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if !req.Spec().IsClient {
			if err := malformed(req.Any()); err != nil {
				return nil, err
			}
		}
		return next(ctx, req)
	}
}

func (malformedInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (malformedInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		return next(ctx, decodedConn{conn})
	}
}

// decodedConn refuses each received message that could not be decoded.
type decodedConn struct{ connect.StreamingHandlerConn }

func (c decodedConn) Receive(msg any) error {
	if err := c.StreamingHandlerConn.Receive(msg); err != nil {
		return err
	}
	return malformed(msg)
}

// errEmptyJSON is what the JSON codec records for an empty body.
var errEmptyJSON = errors.New("zero-length payload is not a valid JSON object")

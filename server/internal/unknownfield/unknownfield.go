package unknownfield

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/jobplane/jobplane/sdk/wire/apierror"
)

// HandlerOptions returns the options that make a Connect handler refuse
// requests with unknown fields: the JSON codec (under both names connect
// serves JSON by) and the interceptor. Use them on handlers only.
func HandlerOptions() []connect.HandlerOption {
	return []connect.HandlerOption{
		connect.WithCodec(&jsonCodec{name: "json"}),
		connect.WithCodec(&jsonCodec{name: "json; charset=utf-8"}),
		connect.WithInterceptors(interceptor{}),
	}
}

// Find returns one violation per unknown field in m and in every message
// it holds, with paths in proto field names (list elements as [i], map
// entries as ["key"]), sorted by path. It is empty for a message that
// holds no unknown fields.
func Find(m proto.Message) []apierror.Field {
	var out []apierror.Field
	find(m.ProtoReflect(), "", &out)
	slices.SortStableFunc(out, func(a, b apierror.Field) int { return strings.Compare(a.Path, b.Path) })
	return out
}

func find(m protoreflect.Message, path string, out *[]apierror.Field) {
	for b := m.GetUnknown(); len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			*out = append(*out, apierror.Field{Path: path, Description: "malformed unknown fields"})
			break
		}
		vn := protowire.ConsumeFieldValue(num, typ, b[n:])
		if vn < 0 {
			*out = append(*out, apierror.Field{Path: path, Description: "malformed unknown fields"})
			break
		}
		value := b[n : n+vn]
		b = b[n+vn:]
		if f, ok := recorded(path, num, typ, value); ok {
			*out = append(*out, f)
			continue
		}
		*out = append(*out, apierror.Field{
			Path:        join(path, strconv.Itoa(int(num))),
			Description: fmt.Sprintf("unknown field number %d: not in this server's schema", num),
		})
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		p := join(path, string(fd.Name()))
		switch {
		case fd.IsMap():
			if isMessage(fd.MapValue()) {
				v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
					find(mv.Message(), p+mapKey(fd.MapKey(), k), out)
					return true
				})
			}
		case fd.IsList():
			if isMessage(fd) {
				for i, l := 0, v.List(); i < l.Len(); i++ {
					find(l.Get(i).Message(), fmt.Sprintf("%s[%d]", p, i), out)
				}
			}
		case isMessage(fd):
			find(v.Message(), p, out)
		}
		return true
	})
}

// recordedNumber is the field number under which jsonCodec records, in
// the request's top-level unknown fields, each JSON key or enum name it
// did not know, as a serialized google.rpc.BadRequest.FieldViolation. It
// is the largest valid field number, one a schema is unlikely ever to
// use. A binary client that sends it itself gets its own violation back:
// still a refusal.
const recordedNumber = protowire.MaxValidNumber

// recorded decodes a violation that jsonCodec recorded.
func recorded(path string, num protowire.Number, typ protowire.Type, value []byte) (apierror.Field, bool) {
	if path != "" || num != recordedNumber || typ != protowire.BytesType {
		return apierror.Field{}, false
	}
	raw, n := protowire.ConsumeBytes(value)
	var v errdetails.BadRequest_FieldViolation
	if n < 0 || proto.Unmarshal(raw, &v) != nil || v.GetField() == "" {
		return apierror.Field{}, false
	}
	return apierror.Field{Path: v.GetField(), Description: v.GetDescription()}, true
}

// record adds f to m's unknown fields, for Find to report.
func record(m protoreflect.Message, f apierror.Field) {
	// Two valid strings always marshal; were it to fail, Find would still
	// report the field, by its number.
	raw, _ := proto.Marshal(&errdetails.BadRequest_FieldViolation{Field: f.Path, Description: f.Description})
	b := protowire.AppendTag(m.GetUnknown(), recordedNumber, protowire.BytesType)
	m.SetUnknown(protowire.AppendBytes(b, raw))
}

func isMessage(fd protoreflect.FieldDescriptor) bool {
	return fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind
}

// mapKey formats a map entry's path segment as package jobgraph does:
// ["key"] for strings, [key] otherwise.
func mapKey(fd protoreflect.FieldDescriptor, k protoreflect.MapKey) string {
	if fd.Kind() == protoreflect.StringKind {
		return fmt.Sprintf("[%q]", k.String())
	}
	return "[" + k.String() + "]"
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// interceptor refuses requests that hold unknown fields, before the
// handler sees them.
type interceptor struct{}

func (interceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if !req.Spec().IsClient {
			if err := check(req.Any()); err != nil {
				return nil, err
			}
		}
		return next(ctx, req)
	}
}

func (interceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (interceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		return next(ctx, checkedConn{conn})
	}
}

// checkedConn refuses each received message that holds unknown fields.
type checkedConn struct{ connect.StreamingHandlerConn }

func (c checkedConn) Receive(msg any) error {
	if err := c.StreamingHandlerConn.Receive(msg); err != nil {
		return err
	}
	return check(msg)
}

// check returns INVALID_ARGUMENT with the unknown fields of msg, or nil.
func check(msg any) error {
	m, ok := msg.(proto.Message)
	if !ok {
		return nil
	}
	if fields := Find(m); len(fields) > 0 {
		return apierror.BadRequest(fields...)
	}
	return nil
}

package unknownfield

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/jobplane/jobplane/sdk/wire/apierror"
)

// jsonCodec is connect's JSON codec, except that what it does not know it
// keeps: every unknown key, and every enum value given by an unknown
// name, is recorded in the decoded message (see record) with its path,
// for the interceptor to refuse.
//
// It decodes as connect's codec does (protojson, discarding unknown
// fields, so every other error is the same), then walks the JSON once
// more beside the message's descriptor to find what protojson dropped.
// Refusing in the codec itself would be simpler, but connect wraps a
// codec's error as INVALID_ARGUMENT without details, and the contract
// promises BadRequest field violations.
//
// A lenient one (DecodeOptions, for every handler) records only a body
// it cannot decode at all (see recordMalformed), and leaves unknown keys
// dropped.
type jsonCodec struct {
	name    string
	lenient bool
}

func (c *jsonCodec) Name() string { return c.name }

func (c *jsonCodec) Marshal(msg any) ([]byte, error) {
	m, ok := msg.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a protobuf message", msg)
	}
	return protojson.MarshalOptions{}.Marshal(m)
}

func (c *jsonCodec) MarshalAppend(dst []byte, msg any) ([]byte, error) {
	m, ok := msg.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a protobuf message", msg)
	}
	return protojson.MarshalOptions{}.MarshalAppend(dst, m)
}

func (c *jsonCodec) Unmarshal(data []byte, msg any) error {
	m, ok := msg.(proto.Message)
	if !ok {
		return fmt.Errorf("%T is not a protobuf message", msg)
	}
	if len(data) == 0 {
		recordMalformed(m, errEmptyJSON)
		return nil
	}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(data, m); err != nil {
		recordMalformed(m, err)
		return nil
	}
	if c.lenient {
		return nil
	}
	var tree any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&tree); err != nil {
		recordMalformed(m, err)
		return nil
	}
	var fields []apierror.Field
	unknownJSON(m.ProtoReflect().Descriptor(), tree, "", &fields)
	for _, f := range fields {
		record(m.ProtoReflect(), f)
	}
	return nil
}

// unknownJSON appends a violation for each key of the JSON object v that
// names no field of md, and each unknown enum name, at any depth.
func unknownJSON(md protoreflect.MessageDescriptor, v any, path string, out *[]apierror.Field) {
	if md.ParentFile().Package() == "google.protobuf" {
		// Well-known types have JSON forms of their own (strings for
		// Duration and Timestamp, any object for Struct), which protojson
		// has checked.
		return
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return
	}
	fields := md.Fields()
	for _, key := range sortedKeys(obj) {
		// protojson accepts a field's JSON name and its proto name.
		fd := fields.ByJSONName(key)
		if fd == nil {
			fd = fields.ByTextName(key)
		}
		if fd == nil {
			*out = append(*out, apierror.Field{Path: join(path, key), Description: "unknown field"})
			continue
		}
		val := obj[key]
		p := join(path, string(fd.Name()))
		switch {
		case val == nil:
			// null is the field's default, whatever its type.
		case fd.IsMap():
			entries, _ := val.(map[string]any)
			for _, k := range sortedKeys(entries) {
				unknownValue(fd.MapValue(), entries[k], fmt.Sprintf("%s[%q]", p, k), out)
			}
		case fd.IsList():
			elems, _ := val.([]any)
			for i, e := range elems {
				unknownValue(fd, e, fmt.Sprintf("%s[%d]", p, i), out)
			}
		default:
			unknownValue(fd, val, p, out)
		}
	}
}

// unknownValue checks one value of field fd.
func unknownValue(fd protoreflect.FieldDescriptor, v any, path string, out *[]apierror.Field) {
	switch {
	case isMessage(fd):
		unknownJSON(fd.Message(), v, path, out)
	case fd.Kind() == protoreflect.EnumKind:
		// A number is kept as is, as binary keeps it; a name protojson
		// does not know is dropped, so the field would read as unset.
		name, ok := v.(string)
		if ok && fd.Enum().FullName() != "google.protobuf.NullValue" && fd.Enum().Values().ByName(protoreflect.Name(name)) == nil {
			*out = append(*out, apierror.Field{Path: path, Description: fmt.Sprintf("unknown enum value %q", name)})
		}
	}
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

package hastore

import (
	"bytes"
	"fmt"
	"strconv"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Canonical returns the canonical encoding of m (HAStoreService's
// "Equality"): the binary encoding with fields in field-number order, map
// entries in key order, scalars of implicit presence written only when
// their bits are not all zero (so -0.0 is written and 0.0 is not), and
// repeated scalars packed. m must hold no unknown fields, which
// ValidateCanonical refuses: the encoding of a message that holds some is
// not canonical.
//
// Go's deterministic marshaling makes every one of these choices; the
// store's stored bytes are this encoding.
func Canonical(m proto.Message) ([]byte, error) {
	return proto.MarshalOptions{Deterministic: true}.Marshal(m)
}

// Same reports whether a and b are the same message by the store's
// Equality: their canonical encodings are byte-equal. Two floating-point
// values are the same when their bits are: -0.0 is not 0.0, and a NaN is
// the same only as a NaN of the same bits. A message that does not
// encode is the same as none.
func Same(a, b proto.Message) bool {
	ea, err := Canonical(a)
	if err != nil {
		return false
	}
	eb, err := Canonical(b)
	return err == nil && bytes.Equal(ea, eb)
}

// ValidateCanonical checks that m has one canonical encoding: it holds no
// unknown field, and every google.protobuf.Duration and Timestamp in it is
// normalized (a Duration's seconds and nanos of one sign, |nanos| under
// 1e9, within ±10,000 years; a Timestamp's nanos in [0, 1e9) and its
// seconds from 0001-01-01 to 9999-12-31). Violations are named by their
// path from field (proto field names, list elements as [i], map entries as
// ["key"], unknown fields by number).
func ValidateCanonical(field string, m proto.Message) error {
	var v validation
	v.canonical(field, m.ProtoReflect())
	return v.err()
}

var (
	durationName  = (&durationpb.Duration{}).ProtoReflect().Descriptor().FullName()
	timestampName = (&timestamppb.Timestamp{}).ProtoReflect().Descriptor().FullName()
)

func (v *validation) canonical(path string, m protoreflect.Message) {
	if !m.IsValid() {
		return
	}
	for b := m.GetUnknown(); len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			v.add(path, "malformed unknown fields")
			break
		}
		vn := protowire.ConsumeFieldValue(num, typ, b[n:])
		if vn < 0 {
			v.add(path, "malformed unknown fields")
			break
		}
		b = b[n+vn:]
		v.add(path+"."+strconv.Itoa(int(num)), fmt.Sprintf("unknown field number %d: not in this store's schema", num))
	}
	switch m.Descriptor().FullName() {
	case durationName:
		if err := m.Interface().(*durationpb.Duration).CheckValid(); err != nil {
			v.add(path, fmt.Sprintf("not a normalized Duration: %v", err))
		}
		return
	case timestampName:
		if err := m.Interface().(*timestamppb.Timestamp).CheckValid(); err != nil {
			v.add(path, fmt.Sprintf("not a normalized Timestamp: %v", err))
		}
		return
	}
	m.Range(func(fd protoreflect.FieldDescriptor, val protoreflect.Value) bool {
		p := path + "." + string(fd.Name())
		switch {
		case fd.IsMap():
			if isMessageKind(fd.MapValue()) {
				val.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
					v.canonical(p+mapKeyPath(fd.MapKey(), k), mv.Message())
					return true
				})
			}
		case fd.IsList():
			if isMessageKind(fd) {
				for i, l := 0, val.List(); i < l.Len(); i++ {
					v.canonical(fmt.Sprintf("%s[%d]", p, i), l.Get(i).Message())
				}
			}
		case isMessageKind(fd):
			v.canonical(p, val.Message())
		}
		return true
	})
}

func isMessageKind(fd protoreflect.FieldDescriptor) bool {
	return fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind
}

// mapKeyPath formats a map entry's path segment: ["key"] for strings,
// [key] otherwise.
func mapKeyPath(fd protoreflect.FieldDescriptor, k protoreflect.MapKey) string {
	if fd.Kind() == protoreflect.StringKind {
		return fmt.Sprintf("[%q]", k.String())
	}
	return "[" + k.String() + "]"
}

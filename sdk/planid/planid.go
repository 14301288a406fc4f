// Package planid computes a job's plan identity as the contract defines it
// (see JobGraph in proto/jobplane/v1/job_graph.proto): two submissions
// carry the same plan when their JobGraphs, normalized, are equal; and the
// digest of a plan, the SHA-256 of the canonical encoding of the
// normalized JobGraph, is the same in every implementation that follows
// the contract, whatever encoding the client sent.
package planid

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"math"
	"slices"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
)

// Digest returns the plan digest of g: the SHA-256 of the canonical
// encoding of Normalize(g).
func Digest(g *jobplanev1.JobGraph) []byte {
	sum := sha256.Sum256(Canonical(Normalize(g)))
	return sum[:]
}

// Same reports whether a and b carry the same plan.
func Same(a, b *jobplanev1.JobGraph) bool {
	return proto.Equal(Normalize(a), Normalize(b))
}

// Normalize returns a copy of g in which every value that the contract
// gives the same meaning as another is replaced by one of them, the unset
// one where there is one:
//
//   - a vertex name equal to its id is unset (an empty name means the id);
//   - an entry of `parallelism_overrides` that names no vertex is removed
//     (it is ignored);
//   - a restart strategy that is unset, has no strategy, or is `none`, is
//     unset;
//   - a Duration of zero is unset, wherever unset and zero mean the same
//     (`client_heartbeat_timeout`, and every delay, interval and
//     `reset_after` of a restart strategy);
//   - `scheduling_mode` PIPELINED_REGION is UNSPECIFIED;
//   - `checkpoints` without an interval is unset; in one with an interval,
//     a zero Duration is unset and `retained` 1 is 0;
//   - an exponential delay's `multiplier` of 2 is 0, and a double of
//     negative zero is 0;
//   - a JobConfig left empty by the above is unset.
//
// Vertex and edge order is kept: it is part of the plan.
func Normalize(g *jobplanev1.JobGraph) *jobplanev1.JobGraph {
	n := proto.CloneOf(g)
	if n == nil {
		return nil
	}
	ids := make(map[string]bool, len(n.GetVertices()))
	for _, v := range n.GetVertices() {
		ids[v.GetId()] = true
		if v.GetName() == v.GetId() {
			v.Name = ""
		}
	}
	c := n.GetConfig()
	if c == nil {
		return n
	}
	for id := range c.GetParallelismOverrides() {
		if !ids[id] {
			delete(c.ParallelismOverrides, id)
		}
	}
	c.ClientHeartbeatTimeout = duration(c.GetClientHeartbeatTimeout())
	if c.GetSchedulingMode() == jobplanev1.SchedulingMode_SCHEDULING_MODE_PIPELINED_REGION {
		c.SchedulingMode = jobplanev1.SchedulingMode_SCHEDULING_MODE_UNSPECIFIED
	}
	switch s := c.GetRestartStrategy().GetStrategy().(type) {
	case nil, *jobplanev1.RestartStrategy_None:
		c.RestartStrategy = nil
	case *jobplanev1.RestartStrategy_FixedDelay_:
		s.FixedDelay.Delay = duration(s.FixedDelay.GetDelay())
	case *jobplanev1.RestartStrategy_ExponentialDelay_:
		e := s.ExponentialDelay
		e.InitialDelay, e.MaxDelay, e.ResetAfter = duration(e.GetInitialDelay()), duration(e.GetMaxDelay()), duration(e.GetResetAfter())
		if e.GetMultiplier() == 2 {
			e.Multiplier = 0
		}
		// A double of negative zero is already unset here: proto.CloneOf
		// copies no zero value, and -0 == 0.
	case *jobplanev1.RestartStrategy_FailureRate_:
		f := s.FailureRate
		f.Interval, f.Delay = duration(f.GetInterval()), duration(f.GetDelay())
	}
	if cp := c.GetCheckpoints(); cp != nil {
		if duration(cp.GetInterval()) == nil {
			c.Checkpoints = nil
		} else {
			cp.Timeout, cp.MinPause = duration(cp.GetTimeout()), duration(cp.GetMinPause())
			if cp.GetRetained() == 1 {
				cp.Retained = 0
			}
		}
	}
	if proto.Size(c) == 0 {
		n.Config = nil
	}
	return n
}

// duration returns d, or nil if it is zero.
func duration(d *durationpb.Duration) *durationpb.Duration {
	if d.GetSeconds() == 0 && d.GetNanos() == 0 {
		return nil
	}
	return d
}

// Canonical returns the canonical encoding of m, the bytes the plan digest
// is taken of. It is the protobuf binary encoding with every choice the
// format leaves open made one way:
//
//   - fields in increasing field-number order; a field is written if it
//     is set: a scalar or enum other than its default (zero, false, empty),
//     a message that is present, a list or map with an element;
//   - integers and enums as varints (int32 and enums sign-extended to 64
//     bits, sint as zigzag), fixed-width types little-endian, doubles by
//     their IEEE 754 bits;
//   - a repeated number, bool or enum field packed, as one record; any
//     other repeated field one record per element, in order;
//   - a map one record per entry, in increasing order of the keys (strings
//     by their UTF-8 bytes), each entry a message with the key as field 1
//     and the value as field 2, both always written;
//   - a message field as a length-delimited record of its own canonical
//     encoding; no unknown fields.
func Canonical(m proto.Message) []byte {
	if m == nil {
		return nil
	}
	return appendMessage(nil, m.ProtoReflect())
}

func appendMessage(b []byte, m protoreflect.Message) []byte {
	fields := m.Descriptor().Fields()
	order := make([]protoreflect.FieldDescriptor, fields.Len())
	for i := range order {
		order[i] = fields.Get(i)
	}
	slices.SortFunc(order, func(x, y protoreflect.FieldDescriptor) int { return cmp.Compare(x.Number(), y.Number()) })
	for _, fd := range order {
		if !m.Has(fd) {
			continue
		}
		v := m.Get(fd)
		switch {
		case fd.IsMap():
			b = appendMap(b, fd, v.Map())
		case fd.IsList() && packable(fd.Kind()):
			var packed []byte
			for i := range v.List().Len() {
				packed = appendScalar(packed, fd.Kind(), v.List().Get(i))
			}
			b = protowire.AppendTag(b, fd.Number(), protowire.BytesType)
			b = protowire.AppendBytes(b, packed)
		case fd.IsList():
			for i := range v.List().Len() {
				b = appendField(b, fd, v.List().Get(i))
			}
		default:
			b = appendField(b, fd, v)
		}
	}
	return b
}

func appendMap(b []byte, fd protoreflect.FieldDescriptor, m protoreflect.Map) []byte {
	keys := make([]protoreflect.MapKey, 0, m.Len())
	m.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
		keys = append(keys, k)
		return true
	})
	slices.SortFunc(keys, compareKeys)
	for _, k := range keys {
		var entry []byte
		entry = appendField(entry, fd.MapKey(), k.Value())
		entry = appendField(entry, fd.MapValue(), m.Get(k))
		b = protowire.AppendTag(b, fd.Number(), protowire.BytesType)
		b = protowire.AppendBytes(b, entry)
	}
	return b
}

func compareKeys(x, y protoreflect.MapKey) int {
	switch xv := x.Interface().(type) {
	case string:
		return cmp.Compare(xv, y.String())
	case bool:
		return cmp.Compare(b2i(xv), b2i(y.Bool()))
	case int32, int64:
		return cmp.Compare(x.Int(), y.Int())
	default:
		return cmp.Compare(x.Uint(), y.Uint())
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// packable reports whether a repeated field of kind k is packed.
func packable(k protoreflect.Kind) bool {
	switch k {
	case protoreflect.StringKind, protoreflect.BytesKind, protoreflect.MessageKind, protoreflect.GroupKind:
		return false
	}
	return true
}

// appendField appends one record of fd with value v.
func appendField(b []byte, fd protoreflect.FieldDescriptor, v protoreflect.Value) []byte {
	switch k := fd.Kind(); k {
	case protoreflect.StringKind:
		b = protowire.AppendTag(b, fd.Number(), protowire.BytesType)
		return protowire.AppendString(b, v.String())
	case protoreflect.BytesKind:
		b = protowire.AppendTag(b, fd.Number(), protowire.BytesType)
		return protowire.AppendBytes(b, v.Bytes())
	case protoreflect.MessageKind, protoreflect.GroupKind:
		b = protowire.AppendTag(b, fd.Number(), protowire.BytesType)
		return protowire.AppendBytes(b, appendMessage(nil, v.Message()))
	default:
		b = protowire.AppendTag(b, fd.Number(), wireType(k))
		return appendScalar(b, k, v)
	}
}

func wireType(k protoreflect.Kind) protowire.Type {
	switch k {
	case protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind, protoreflect.FloatKind:
		return protowire.Fixed32Type
	case protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind, protoreflect.DoubleKind:
		return protowire.Fixed64Type
	}
	return protowire.VarintType
}

// appendScalar appends the value of a number, bool or enum, untagged.
func appendScalar(b []byte, k protoreflect.Kind, v protoreflect.Value) []byte {
	switch k {
	case protoreflect.BoolKind:
		return protowire.AppendVarint(b, uint64(b2i(v.Bool())))
	case protoreflect.EnumKind:
		return protowire.AppendVarint(b, uint64(int64(v.Enum())))
	case protoreflect.Int32Kind, protoreflect.Int64Kind:
		return protowire.AppendVarint(b, uint64(v.Int()))
	case protoreflect.Sint32Kind, protoreflect.Sint64Kind:
		return protowire.AppendVarint(b, protowire.EncodeZigZag(v.Int()))
	case protoreflect.Uint32Kind, protoreflect.Uint64Kind:
		return protowire.AppendVarint(b, v.Uint())
	case protoreflect.Fixed32Kind:
		return binary.LittleEndian.AppendUint32(b, uint32(v.Uint()))
	case protoreflect.Sfixed32Kind:
		return binary.LittleEndian.AppendUint32(b, uint32(v.Int()))
	case protoreflect.FloatKind:
		return binary.LittleEndian.AppendUint32(b, math.Float32bits(float32(v.Float())))
	case protoreflect.Fixed64Kind:
		return binary.LittleEndian.AppendUint64(b, v.Uint())
	case protoreflect.Sfixed64Kind:
		return binary.LittleEndian.AppendUint64(b, uint64(v.Int()))
	case protoreflect.DoubleKind:
		return binary.LittleEndian.AppendUint64(b, math.Float64bits(v.Float()))
	}
	panic("planid: not a scalar kind: " + k.String())
}

package runner

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
)

// storeEqualityCases check HAStoreService's Equality (since 1.2): the same
// message is the same canonical encoding, and what would give a value two
// encodings is refused.
var storeEqualityCases = []Case{
	{
		Name: "store/equal-by-encoding",
		Doc:  "a plan put in binary with fields and map entries in reverse order, then again as Go encodes it, is the same plan (OK, created=false); one whose double differs only in its NaN payload, or in -0.0 for 0.0, is another plan (ALREADY_EXISTS, EXECUTION_PLAN_EXISTS); the store keeps the first plan's bits",
		Run:  storeEqualByEncoding,
	},
	{
		Name: "store/unknown-fields-refused",
		Doc:  "a PutExecutionPlan with an unknown field number deep in the plan (binary), a CreateDirtyJobResult with an unknown JSON key, and a GetLeader with an unknown field are INVALID_ARGUMENT with a violation naming the field, and write nothing",
		Run:  storeUnknownFieldsRefused,
	},
	{
		Name: "store/durations-normalized",
		Doc:  "a plan holding a Duration whose nanos and seconds have opposite signs, and a result whose Timestamp has nanos of a whole second, are INVALID_ARGUMENT naming the field, and write nothing: every value has one encoding",
		Run:  storeDurationsNormalized,
	},
}

// NaNs of two payloads: the same to Go's proto.Equal, not to the store.
var (
	nanA = math.Float64frombits(0x7ff8000000000001)
	nanB = math.Float64frombits(0x7ff8000000000002)
)

// equalityPlan is a plan with maps of several entries, Durations and the
// two doubles of an exponential-delay restart strategy.
func equalityPlan(id string, multiplier, jitter float64) *hastorev1.ExecutionPlan {
	p := wirePlan(time.Unix(1_700_000_000, 123_000_000))
	p.JobId = id
	p.JobGraph.Config = &jobplanev1.JobConfig{
		ParallelismOverrides: map[string]int32{"a": 1, "b": 2, "c": 3},
		RestartStrategy: &jobplanev1.RestartStrategy{Strategy: &jobplanev1.RestartStrategy_ExponentialDelay_{ExponentialDelay: &jobplanev1.RestartStrategy_ExponentialDelay{
			InitialDelay: durationpb.New(time.Second), MaxDelay: durationpb.New(time.Minute), Multiplier: multiplier, Jitter: jitter, Attempts: 3,
		}}},
	}
	return p
}

// rawProto is a codec that sends fixed binary bytes, whatever the message.
type rawProto []byte

func (c rawProto) Name() string                { return "proto" }
func (c rawProto) Marshal(any) ([]byte, error) { return c, nil }
func (c rawProto) Unmarshal(b []byte, m any) error {
	msg, ok := m.(proto.Message)
	if !ok {
		return fmt.Errorf("rawProto: %T is no protobuf message", m)
	}
	return proto.Unmarshal(b, msg)
}

// putRaw sends a PutExecutionPlan whose body is b, and returns its answer.
func (t *T) putRaw(b []byte) (*hastorev1.PutExecutionPlanResponse, error) {
	ctx, cancel := context.WithTimeout(t.ctx, 10*time.Second)
	defer cancel()
	call := connect.NewClient[hastorev1.PutExecutionPlanRequest, hastorev1.PutExecutionPlanResponse](t.store.http,
		t.store.url()+"/jobplane.hastore.v1.HAStoreService/PutExecutionPlan", append(t.store.wire.options(), connect.WithCodec(rawProto(b)))...)
	resp, err := call.CallUnary(ctx, connect.NewRequest(&hastorev1.PutExecutionPlanRequest{}))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

// reversed is m's binary encoding with each choice the format leaves open
// made against the canonical one: fields in decreasing field-number order,
// map entries in decreasing key order with the value before the key, and
// repeated numbers unpacked. Every decoder reads it as m.
func reversed(m protoreflect.Message) []byte {
	var fields []protoreflect.FieldDescriptor
	m.Range(func(fd protoreflect.FieldDescriptor, _ protoreflect.Value) bool {
		fields = append(fields, fd)
		return true
	})
	sort.Slice(fields, func(i, j int) bool { return fields[i].Number() > fields[j].Number() })
	var b []byte
	for _, fd := range fields {
		v := m.Get(fd)
		switch {
		case fd.IsMap():
			var keys []protoreflect.MapKey
			v.Map().Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
				keys = append(keys, k)
				return true
			})
			sort.Slice(keys, func(i, j int) bool { return fmt.Sprint(keys[i].Interface()) > fmt.Sprint(keys[j].Interface()) })
			for _, k := range keys {
				entry := appendValue(nil, fd.MapValue(), v.Map().Get(k))
				entry = appendValue(entry, fd.MapKey(), k.Value())
				b = protowire.AppendTag(b, fd.Number(), protowire.BytesType)
				b = protowire.AppendBytes(b, entry)
			}
		case fd.IsList():
			for i, l := 0, v.List(); i < l.Len(); i++ {
				b = appendValue(b, fd, l.Get(i))
			}
		default:
			b = appendValue(b, fd, v)
		}
	}
	return b
}

// appendValue appends one record of field fd holding v.
func appendValue(b []byte, fd protoreflect.FieldDescriptor, v protoreflect.Value) []byte {
	n := fd.Number()
	switch fd.Kind() {
	case protoreflect.MessageKind:
		return protowire.AppendBytes(protowire.AppendTag(b, n, protowire.BytesType), reversed(v.Message()))
	case protoreflect.StringKind:
		return protowire.AppendString(protowire.AppendTag(b, n, protowire.BytesType), v.String())
	case protoreflect.BytesKind:
		return protowire.AppendBytes(protowire.AppendTag(b, n, protowire.BytesType), v.Bytes())
	case protoreflect.BoolKind:
		return protowire.AppendVarint(protowire.AppendTag(b, n, protowire.VarintType), protowire.EncodeBool(v.Bool()))
	case protoreflect.EnumKind:
		return protowire.AppendVarint(protowire.AppendTag(b, n, protowire.VarintType), uint64(int64(v.Enum())))
	case protoreflect.Int32Kind, protoreflect.Int64Kind:
		return protowire.AppendVarint(protowire.AppendTag(b, n, protowire.VarintType), uint64(v.Int()))
	case protoreflect.Uint32Kind, protoreflect.Uint64Kind:
		return protowire.AppendVarint(protowire.AppendTag(b, n, protowire.VarintType), v.Uint())
	case protoreflect.Sint32Kind, protoreflect.Sint64Kind:
		return protowire.AppendVarint(protowire.AppendTag(b, n, protowire.VarintType), protowire.EncodeZigZag(v.Int()))
	case protoreflect.DoubleKind:
		return protowire.AppendFixed64(protowire.AppendTag(b, n, protowire.Fixed64Type), math.Float64bits(v.Float()))
	case protoreflect.FloatKind:
		return protowire.AppendFixed32(protowire.AppendTag(b, n, protowire.Fixed32Type), math.Float32bits(float32(v.Float())))
	case protoreflect.Fixed64Kind:
		return protowire.AppendFixed64(protowire.AppendTag(b, n, protowire.Fixed64Type), v.Uint())
	case protoreflect.Sfixed64Kind:
		return protowire.AppendFixed64(protowire.AppendTag(b, n, protowire.Fixed64Type), uint64(v.Int()))
	case protoreflect.Fixed32Kind:
		return protowire.AppendFixed32(protowire.AppendTag(b, n, protowire.Fixed32Type), uint32(v.Uint()))
	case protoreflect.Sfixed32Kind:
		return protowire.AppendFixed32(protowire.AppendTag(b, n, protowire.Fixed32Type), uint32(v.Int()))
	}
	panic(fmt.Sprintf("reversed: field %s of kind %v", fd.FullName(), fd.Kind()))
}

func storeEqualByEncoding(t *T) {
	fence := t.storeDispatcher()
	rpc := t.store.rpc()
	ctx, cancel := context.WithTimeout(t.ctx, 20*time.Second)
	defer cancel()
	put := func(p *hastorev1.ExecutionPlan) (*hastorev1.PutExecutionPlanResponse, error) {
		return rpc.PutExecutionPlan(ctx, &hastorev1.PutExecutionPlanRequest{Fence: fence, Plan: p})
	}
	plan := equalityPlan("equal", nanA, 0.25)
	req := &hastorev1.PutExecutionPlanRequest{Fence: fence, Plan: plan}
	body := reversed(req.ProtoReflect())
	if canonical, _ := (proto.MarshalOptions{Deterministic: true}).Marshal(req); string(canonical) == string(body) {
		t.Fatalf("setup: the reversed encoding is the canonical one")
	}
	if resp, err := t.putRaw(body); err != nil || !resp.GetCreated() {
		t.Fatalf("PutExecutionPlan in binary, fields and map entries in reverse order: %v, %v; expected the plan stored (created=true)", resp, err)
	}
	if resp, err := put(plan); err != nil || resp.GetCreated() {
		t.Errorf("PutExecutionPlan of the same plan as Go encodes it: %v, %s; expected OK with created=false: the canonical encodings are byte-equal (HAStoreService, Equality)", resp, codeAndReason(err))
	}
	for _, c := range []struct {
		what string
		plan *hastorev1.ExecutionPlan
	}{
		{"a multiplier that is a NaN of another payload", equalityPlan("equal", nanB, 0.25)},
		{"another multiplier", equalityPlan("equal", 1.5, 0.25)},
	} {
		if _, err := put(c.plan); connect.CodeOf(err) != connect.CodeAlreadyExists || reason(err) != "EXECUTION_PLAN_EXISTS" {
			t.Errorf("PutExecutionPlan of the plan with %s: %s; expected ALREADY_EXISTS (EXECUTION_PLAN_EXISTS): doubles are compared by their bits", c.what, codeAndReason(err))
		}
	}
	got, err := rpc.GetExecutionPlan(ctx, &hastorev1.GetExecutionPlanRequest{JobId: "equal"})
	if m := got.GetPlan().GetJobGraph().GetConfig().GetRestartStrategy().GetExponentialDelay().GetMultiplier(); err != nil || math.Float64bits(m) != math.Float64bits(nanA) {
		t.Errorf("GetExecutionPlan's multiplier = %#x, %v; expected the first plan's NaN, %#x, bit for bit", math.Float64bits(m), err, math.Float64bits(nanA))
	}
	// 0.0 is the default, left out; -0.0 is written: two plans.
	if _, err := put(equalityPlan("zero", 1.5, 0)); err != nil {
		t.Fatalf("PutExecutionPlan with a jitter of 0.0: %v", err)
	}
	if _, err := put(equalityPlan("zero", 1.5, math.Copysign(0, -1))); connect.CodeOf(err) != connect.CodeAlreadyExists || reason(err) != "EXECUTION_PLAN_EXISTS" {
		t.Errorf("PutExecutionPlan of the plan with a jitter of -0.0 for 0.0: %s; expected ALREADY_EXISTS (EXECUTION_PLAN_EXISTS): -0.0 is not 0.0 by their bits", codeAndReason(err))
	}
}

// violation reports whether err is INVALID_ARGUMENT with a field
// violation for which match holds, and lists its violations.
func violation(err error, match func(field string) bool) (bool, []string) {
	br, _ := errorDetail[*errdetails.BadRequest](err)
	var fields []string
	for _, v := range br.GetFieldViolations() {
		fields = append(fields, v.GetField())
	}
	return connect.CodeOf(err) == connect.CodeInvalidArgument && slices.ContainsFunc(fields, match), fields
}

func storeUnknownFieldsRefused(t *T) {
	fence := t.storeDispatcher()
	rpc := t.store.rpc()
	ctx, cancel := context.WithTimeout(t.ctx, 20*time.Second)
	defer cancel()
	plan := equalityPlan("unknown", 1.5, 0)
	plan.JobGraph.Config.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 1))
	_, err := rpc.PutExecutionPlan(ctx, &hastorev1.PutExecutionPlanRequest{Fence: fence, Plan: plan})
	if ok, fields := violation(err, func(f string) bool { return f == "plan.job_graph.config.99" }); !ok {
		t.Errorf("PutExecutionPlan with the unknown field plan.job_graph.config.99: %s (violations %v); expected INVALID_ARGUMENT with a violation naming plan.job_graph.config.99", codeAndReason(err), fields)
	}
	if _, err := rpc.GetExecutionPlan(ctx, &hastorev1.GetExecutionPlanRequest{JobId: "unknown"}); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("GetExecutionPlan after the refused put: %s; expected NOT_FOUND, nothing written", codeAndReason(err))
	}
	body := fmt.Sprintf(`{"fence": %s, "result": {"jobId": "unknown", "status": "JOB_STATUS_FINISHED", "bogusField": 1}}`, fenceJSON(fence))
	err = t.postJSON("CreateDirtyJobResult", body)
	if ok, fields := violation(err, func(f string) bool { return strings.Contains(f, "bogusField") }); !ok {
		t.Errorf("CreateDirtyJobResult in JSON with the unknown key result.bogusField: %s (violations %v); expected INVALID_ARGUMENT with a violation naming bogusField", codeAndReason(err), fields)
	}
	if _, err := rpc.GetJobResultEntry(ctx, &hastorev1.GetJobResultEntryRequest{JobId: "unknown"}); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("GetJobResultEntry after the refused create: %s; expected NOT_FOUND, nothing written", codeAndReason(err))
	}
	get := &hastorev1.GetLeaderRequest{Election: election.JobManager}
	get.ProtoReflect().SetUnknown(protowire.AppendString(protowire.AppendTag(nil, 7, protowire.BytesType), "x"))
	_, err = rpc.GetLeader(ctx, get)
	if ok, fields := violation(err, func(f string) bool { return f == "7" }); !ok {
		t.Errorf("GetLeader with the unknown field 7: %s (violations %v); expected INVALID_ARGUMENT with a violation naming 7: every call refuses unknown fields", codeAndReason(err), fields)
	}
}

func storeDurationsNormalized(t *T) {
	fence := t.storeDispatcher()
	rpc := t.store.rpc()
	ctx, cancel := context.WithTimeout(t.ctx, 20*time.Second)
	defer cancel()
	plan := equalityPlan("duration", 1.5, 0)
	// 1s - 1ns written with nanos of the other sign: normalized, it is
	// {seconds: 0, nanos: 999999999}.
	plan.JobGraph.Config.GetRestartStrategy().GetExponentialDelay().InitialDelay = &durationpb.Duration{Seconds: 1, Nanos: -1}
	_, err := rpc.PutExecutionPlan(ctx, &hastorev1.PutExecutionPlanRequest{Fence: fence, Plan: plan})
	if ok, fields := violation(err, func(f string) bool { return strings.HasSuffix(f, "initial_delay") }); !ok {
		t.Errorf("PutExecutionPlan with the Duration {seconds: 1, nanos: -1}: %s (violations %v); expected INVALID_ARGUMENT naming plan.job_graph.config.restart_strategy.exponential_delay.initial_delay (HAStoreService, Equality)", codeAndReason(err), fields)
	}
	if _, err := rpc.GetExecutionPlan(ctx, &hastorev1.GetExecutionPlanRequest{JobId: "duration"}); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("GetExecutionPlan after the refused put: %s; expected NOT_FOUND, nothing written", codeAndReason(err))
	}
	res := &jobplanev1.JobResult{JobId: "duration", Status: jobplanev1.JobStatus_JOB_STATUS_FINISHED, EndTime: &timestamppb.Timestamp{Seconds: 1_700_000_000, Nanos: 1_000_000_000}}
	_, err = rpc.CreateDirtyJobResult(ctx, &hastorev1.CreateDirtyJobResultRequest{Fence: fence, Result: res})
	if ok, fields := violation(err, func(f string) bool { return strings.HasSuffix(f, "end_time") }); !ok {
		t.Errorf("CreateDirtyJobResult with the Timestamp {nanos: 1000000000}: %s (violations %v); expected INVALID_ARGUMENT naming result.end_time (HAStoreService, Equality)", codeAndReason(err), fields)
	}
	if _, err := rpc.GetJobResultEntry(ctx, &hastorev1.GetJobResultEntryRequest{JobId: "duration"}); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("GetJobResultEntry after the refused create: %s; expected NOT_FOUND, nothing written", codeAndReason(err))
	}
}

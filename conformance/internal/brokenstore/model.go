package main

import (
	"context"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	"github.com/jobplane/jobplane/gen/jobplane/hastore/v1/hastorev1connect"
)

// The breaks of the store's consistency model and equality (contract
// 1.2): stale reads, listings that are no snapshot, equality by Go's
// proto.Equal, unknown fields dropped, Durations normalized rather than
// refused.

// staleFor is how old an answer stale-reads may serve.
const staleFor = time.Second

// cachedRead is a read's answer, as stale-reads keeps it.
type cachedRead struct {
	resp connect.AnyResponse
	err  error
	at   time.Time
}

// reads are the procedures whose answers stale-reads caches.
var reads = map[string]bool{
	hastorev1connect.HAStoreServiceGetExecutionPlanProcedure:     true,
	hastorev1connect.HAStoreServiceListExecutionPlansProcedure:   true,
	hastorev1connect.HAStoreServiceGetJobResultEntryProcedure:    true,
	hastorev1connect.HAStoreServiceListJobResultEntriesProcedure: true,
	hastorev1connect.HAStoreServiceGetLeaderProcedure:            true,
	hastorev1connect.HAStoreServiceListTaskExecutorsProcedure:    true,
	hastorev1connect.HAStoreServiceGetLatestCheckpointProcedure:  true,
	hastorev1connect.HAStoreServiceListCheckpointsProcedure:      true,
	hastorev1connect.HAStoreServiceGetSavepointProcedure:         true,
	hastorev1connect.HAStoreServiceListSavepointsProcedure:       true,
}

func cacheKey(procedure string, req any) string {
	b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(req.(proto.Message))
	return procedure + "\x00" + string(b)
}

// fresh returns the cached answer of key, if stale-reads has one young
// enough to serve.
func (b *broken) fresh(key string) (cachedRead, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c, ok := b.cached[key]
	return c, ok && time.Since(c.at) < staleFor
}

// modelBreaks is the interceptor of the model's breaks: stale-reads
// caches read answers; unknown-fields-dropped drops the unknown fields of
// every request; non-normalized-accepted normalizes its Durations and
// Timestamps.
func (b *broken) modelBreaks() connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			switch {
			case b.mode == "unknown-fields-dropped":
				walk(req.Any().(proto.Message).ProtoReflect(), func(m protoreflect.Message) { m.SetUnknown(nil) })
			case b.mode == "non-normalized-accepted":
				walk(req.Any().(proto.Message).ProtoReflect(), normalize)
			case b.mode == "stale-reads" && reads[req.Spec().Procedure]:
				key := cacheKey(req.Spec().Procedure, req.Any())
				if c, ok := b.fresh(key); ok {
					return c.resp, c.err
				}
				resp, err := next(ctx, req)
				b.mu.Lock()
				b.cached[key] = cachedRead{resp: resp, err: err, at: time.Now()}
				b.mu.Unlock()
				return resp, err
			}
			return next(ctx, req)
		}
	}
}

// walk calls fn with m and every message m holds.
func walk(m protoreflect.Message, fn func(protoreflect.Message)) {
	fn(m)
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		isMsg := func(fd protoreflect.FieldDescriptor) bool { return fd.Kind() == protoreflect.MessageKind }
		switch {
		case fd.IsMap():
			if isMsg(fd.MapValue()) {
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
					walk(mv.Message(), fn)
					return true
				})
			}
		case fd.IsList():
			if isMsg(fd) {
				for i := range v.List().Len() {
					walk(v.List().Get(i).Message(), fn)
				}
			}
		case isMsg(fd):
			walk(v.Message(), fn)
		}
		return true
	})
}

// normalize rewrites a Duration or Timestamp as its normalized value.
func normalize(m protoreflect.Message) {
	switch v := m.Interface().(type) {
	case *durationpb.Duration:
		n := durationpb.New(v.AsDuration())
		v.Seconds, v.Nanos = n.GetSeconds(), n.GetNanos()
	case *timestamppb.Timestamp:
		n := timestamppb.New(v.AsTime())
		v.Seconds, v.Nanos = n.GetSeconds(), n.GetNanos()
	}
}

// ObserveLeader, in stale-reads, answers first with GetLeader's cached
// answer for the election when it has one, then relays the reference's
// stream.
func (b *broken) ObserveLeader(ctx context.Context, req *hastorev1.ObserveLeaderRequest, out *connect.ServerStream[hastorev1.ObserveLeaderResponse]) error {
	if b.mode != "stale-reads" {
		return b.HAStoreServiceHandler.ObserveLeader(ctx, req, out)
	}
	key := cacheKey(hastorev1connect.HAStoreServiceGetLeaderProcedure, &hastorev1.GetLeaderRequest{Election: req.GetElection()})
	if c, ok := b.fresh(key); ok && c.err == nil {
		if leader, ok := c.resp.Any().(*hastorev1.GetLeaderResponse); ok {
			if err := out.Send(&hastorev1.ObserveLeaderResponse{Event: &hastorev1.ObserveLeaderResponse_Leader{Leader: leader.GetLeader()}}); err != nil {
				return err
			}
		}
	}
	in, err := b.inner.ObserveLeader(ctx, req)
	if err != nil {
		return err
	}
	defer in.Close()
	for in.Receive() {
		if err := out.Send(in.Msg()); err != nil {
			return err
		}
	}
	return in.Err()
}

// ListExecutionPlans, in listing-not-a-snapshot, reads the page's first
// id, then the rest 50ms later, as a slow scan over live data would.
func (b *broken) ListExecutionPlans(ctx context.Context, req *hastorev1.ListExecutionPlansRequest) (*hastorev1.ListExecutionPlansResponse, error) {
	if b.mode != "listing-not-a-snapshot" {
		return b.HAStoreServiceHandler.ListExecutionPlans(ctx, req)
	}
	first, err := b.HAStoreServiceHandler.ListExecutionPlans(ctx, &hastorev1.ListExecutionPlansRequest{PageSize: 1, PageToken: req.GetPageToken()})
	size := req.GetPageSize()
	if size <= 0 || size > 1000 {
		size = 1000
	}
	if err != nil || first.GetNextPageToken() == "" || size == 1 {
		return first, err
	}
	select {
	case <-time.After(50 * time.Millisecond):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	rest, err := b.HAStoreServiceHandler.ListExecutionPlans(ctx, &hastorev1.ListExecutionPlansRequest{PageSize: size - 1, PageToken: first.GetNextPageToken()})
	if err != nil {
		return nil, err
	}
	return &hastorev1.ListExecutionPlansResponse{JobIds: append(first.GetJobIds(), rest.GetJobIds()...), NextPageToken: rest.GetNextPageToken()}, nil
}

package telemetry

import (
	"context"
	"strings"
	"sync"

	"connectrpc.com/connect"
	"connectrpc.com/otelconnect"
	"go.opentelemetry.io/otel/attribute"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
)

// liveness are the methods that otelconnect leaves alone, neither traced
// nor timed: liveness calls, which run per pair of processes on a timer,
// so that tracing costs nothing in steady state, whatever the exporter.
// gRPC health and reflection (prefix "/grpc."), which load balancers and
// tools poll, are left alone too.
var liveness = map[string]bool{"Heartbeat": true, "HeartbeatFromTaskExecutor": true, "KeepAlive": true, "ReportClientHeartbeat": true}

func traced(_ context.Context, spec connect.Spec) bool {
	if strings.HasPrefix(spec.Procedure, "/grpc.") {
		return false
	}
	return !liveness[spec.Procedure[strings.LastIndexByte(spec.Procedure, '/')+1:]]
}

// keepAttribute keeps every attribute but those naming the peer of a
// client call: a JobManager calls every TaskExecutor, and a series per
// TaskExecutor and method would grow /metrics with the cluster.
func keepAttribute(_ connect.Spec, kv attribute.KeyValue) bool {
	return kv.Key != "server.address" && kv.Key != "server.port"
}

var (
	rpcMu  sync.Mutex
	rpc    *otelconnect.Interceptor
	rpcFor *instruments // the instruments rpc was built beside
)

// RPC returns the connect interceptor, for handlers and clients alike,
// that traces and measures every call (otelconnect, with the
// OpenTelemetry globals as Setup installs them) except heartbeats: client
// calls carry their trace context, and handlers continue the caller's
// trace. Calls are measured by procedure and status, not by peer. It is
// built once per Setup and shared.
func RPC() connect.Interceptor {
	rpcMu.Lock()
	defer rpcMu.Unlock()
	in := current.Load()
	if rpc == nil || rpcFor != in {
		i, err := otelconnect.NewInterceptor(otelconnect.WithTrustRemote(), otelconnect.WithFilter(traced),
			otelconnect.WithAttributeFilter(keepAttribute))
		if err != nil {
			// Only invalid options fail, and these are fixed.
			panic("telemetry: otelconnect: " + err.Error())
		}
		rpc, rpcFor = i, in
	}
	return rpc
}

// Fencing returns the handler interceptor that counts the calls its
// handlers refuse for a stale fencing token (see FencingRejected), by
// service. HAStoreService is left out: its store counts its own.
func Fencing() connect.Interceptor { return fencing{} }

type fencing struct{}

func (fencing) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		resp, err := next(ctx, req)
		if err != nil && !req.Spec().IsClient {
			countFencing(ctx, req.Spec().Procedure, err)
		}
		return resp, err
	}
}

func (fencing) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (fencing) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		err := next(ctx, conn)
		if err != nil {
			countFencing(ctx, conn.Spec().Procedure, err)
		}
		return err
	}
}

func countFencing(ctx context.Context, procedure string, err error) {
	if !apierror.Is(err, jobplanev1.ErrorReason_ERROR_REASON_STALE_FENCING_TOKEN) {
		return
	}
	// "/jobplane.cluster.v1.TaskExecutorService/SubmitTask" → "TaskExecutorService"
	service, _, _ := strings.Cut(strings.TrimPrefix(procedure, "/"), "/")
	if i := strings.LastIndexByte(service, '.'); i >= 0 {
		service = service[i+1:]
	}
	if service == "HAStoreService" {
		return
	}
	FencingRejected(ctx, service)
}

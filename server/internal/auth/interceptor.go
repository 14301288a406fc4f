package auth

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
	"github.com/jobplane/jobplane/server/internal/principal"
)

// SpanAttribute is the span attribute that names a call's principal
// (OpenTelemetry's enduser.id).
const SpanAttribute = "enduser.id"

// unauthenticatedMessage is what every call without a valid token is
// told, whatever was wrong: no token, a malformed header, an unknown or
// expired token.
const unauthenticatedMessage = `authentication required: send a valid token as "Authorization: Bearer TOKEN"`

// Interceptor authenticates the calls of the services it is given to (on
// the handler side; it leaves client calls alone), puts their principal
// and the Authorizer in their context, names the principal on the call's
// span, and logs one line per call with its principal, procedure and
// code: at debug level for calls answered otherwise than UNAUTHENTICATED
// or PERMISSION_DENIED (one per call would crowd the log at info), at
// info level for those two. A call without a valid token gets
// UNAUTHENTICATED and never reaches the handler.
type Interceptor struct {
	authn *Authenticator
	authz principal.Authorizer
	log   *slog.Logger
}

// NewInterceptor returns an Interceptor that authenticates with authn,
// and puts authz (nil for none: every authenticated call is allowed) in
// each call's context, logging to log (default slog.Default()). Place it
// after the telemetry interceptor, so that the call's span exists.
func NewInterceptor(authn *Authenticator, authz principal.Authorizer, log *slog.Logger) *Interceptor {
	if log == nil {
		log = slog.Default()
	}
	return &Interceptor{authn: authn, authz: authz, log: log}
}

// HandlerOptions returns the handler options that install the
// interceptor.
func (i *Interceptor) HandlerOptions() []connect.HandlerOption {
	return []connect.HandlerOption{connect.WithInterceptors(i)}
}

// WrapUnary implements connect.Interceptor.
func (i *Interceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient {
			return next(ctx, req)
		}
		start := time.Now()
		ctx, p, reason, err := i.authenticate(ctx, req.Header())
		var resp connect.AnyResponse
		if err == nil {
			resp, err = next(ctx, req)
		}
		i.logCall(ctx, p, reason, req.Spec().Procedure, req.Peer().Addr, start, err)
		return resp, err
	}
}

// WrapStreamingClient implements connect.Interceptor: client calls are
// left alone.
func (i *Interceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler implements connect.Interceptor.
func (i *Interceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		start := time.Now()
		ctx, p, reason, err := i.authenticate(ctx, conn.RequestHeader())
		if err == nil {
			err = next(ctx, conn)
		}
		i.logCall(ctx, p, reason, conn.Spec().Procedure, conn.Peer().Addr, start, err)
		return err
	}
}

// authenticate finds the principal of a call's bearer token and returns
// the call's context carrying it (and the Authorizer); the error is the
// call's UNAUTHENTICATED answer, whose message says nothing of what was
// wrong: reason tells it, for the log.
func (i *Interceptor) authenticate(ctx context.Context, h http.Header) (_ context.Context, _ principal.Principal, reason string, _ error) {
	token, ok := bearer(h.Get("Authorization"))
	var (
		p   principal.Principal
		err error
	)
	if !ok {
		err = errors.New("no bearer token")
	} else {
		p, err = i.authn.Authenticate(ctx, token)
	}
	if err != nil {
		cerr := connect.NewError(connect.CodeUnauthenticated, errors.New(unauthenticatedMessage))
		cerr.Meta().Set("WWW-Authenticate", `Bearer realm="jobplane"`)
		return ctx, principal.Principal{}, strings.TrimPrefix(err.Error(), ErrUnauthenticated.Error()+": "), cerr
	}
	trace.SpanFromContext(ctx).SetAttributes(attribute.String(SpanAttribute, p.Name), attribute.String("jobplane.auth.method", p.Method))
	ctx = principal.NewContext(ctx, p)
	if i.authz != nil {
		ctx = principal.WithAuthorizer(ctx, i.authz)
	}
	return ctx, p, "", nil
}

// bearer returns the token of an Authorization header of the Bearer
// scheme (case-insensitive, RFC 6750).
func bearer(h string) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// logCall logs one line for a call.
func (i *Interceptor) logCall(ctx context.Context, p principal.Principal, reason, procedure, peer string, start time.Time, err error) {
	code := "ok"
	level := slog.LevelDebug
	if changesJobs(procedure) {
		level = slog.LevelInfo // who submitted and canceled what: an audit trail
	}
	if err != nil {
		c := connect.CodeOf(err)
		code = c.String()
		if c == connect.CodeUnauthenticated || c == connect.CodePermissionDenied {
			level = slog.LevelInfo
		}
	}
	if !i.log.Enabled(ctx, level) {
		return
	}
	attrs := []slog.Attr{slog.String("procedure", procedure), slog.String("code", code), slog.Duration("duration", time.Since(start))}
	if p.Name != "" {
		attrs = append(attrs, slog.String("principal", p.Name), slog.String("auth", p.Method))
	} else {
		attrs = append(attrs, slog.String("peer", peer), slog.String("reason", reason))
	}
	i.log.LogAttrs(ctx, level, "call", attrs...)
}

// changesJobs reports whether procedure changes jobs (SubmitJob,
// CancelJob, PurgeJob), the calls logged at info level whatever their outcome.
func changesJobs(procedure string) bool {
	return procedure == jobplanev1connect.DispatcherServiceSubmitJobProcedure || procedure == jobplanev1connect.DispatcherServiceCancelJobProcedure ||
		procedure == jobplanev1connect.DispatcherServicePurgeJobProcedure
}

// Package principal carries the authenticated caller of a public RPC in
// the call's context: the authentication interceptor puts it there, and
// authorization, limits, logs and spans read it. It also carries the
// authorization hook (Authorizer) from the interceptor to the handlers,
// which call Authorize once they know what a call is about (a job and
// its owner). It decides nothing itself.
package principal

import (
	"context"
	"errors"
	"fmt"
)

// Principal is who made a call, as the server's authentication found it.
type Principal struct {
	// Name identifies the caller: a static token's name, or a JWT's
	// subject (with its issuer where several issuers are trusted). Never
	// empty.
	Name string
	// Method is how the caller was authenticated, such as "token" or
	// "jwt".
	Method string
}

type contextKey struct{}

// NewContext returns ctx carrying p.
func NewContext(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, contextKey{}, p)
}

// FromContext returns the principal in ctx; ok is false when the call was
// not authenticated (authentication is off, or the call is not on the
// public API).
func FromContext(ctx context.Context) (p Principal, ok bool) {
	p, ok = ctx.Value(contextKey{}).(Principal)
	return p, ok
}

// Request is one call for an Authorizer to judge.
type Request struct {
	// Principal made the call.
	Principal Principal
	// Procedure is the call's full procedure name, such as
	// "/jobplane.v1.DispatcherService/CancelJob".
	Procedure string
	// JobID is the job the call is about; empty for calls about no one
	// job (ListJobs, GetClusterOverview).
	JobID string
	// Owner is the principal that submitted the job of JobID, as the job
	// records it; empty for SubmitJob (judged before its job exists),
	// when there is no such job, and when the job was submitted while
	// authentication was off.
	Owner string
}

// Authorizer decides whether a principal may make a call. The server's
// built-in policy (package auth) is one; an embedder may bring another.
type Authorizer interface {
	// Authorize returns nil to allow the call, and an error wrapping
	// ErrDenied to refuse it (PERMISSION_DENIED); any other error fails
	// the call as INTERNAL. It is called on the call's goroutine, once
	// per call, and must not block for long.
	Authorize(ctx context.Context, r Request) error
}

// ErrDenied is wrapped by the errors with which an Authorizer refuses a
// call.
var ErrDenied = errors.New("permission denied")

type authorizerKey struct{}

// WithAuthorizer returns ctx carrying a, for the handlers that serve the
// call to consult with Authorize once they know the job's owner.
func WithAuthorizer(ctx context.Context, a Authorizer) context.Context {
	return context.WithValue(ctx, authorizerKey{}, a)
}

// Authorize asks the Authorizer in ctx whether the principal in ctx may
// call procedure on jobID, a job submitted by owner. It returns nil when
// ctx carries no Authorizer (authentication is off: every call is
// allowed), and an error wrapping ErrDenied when ctx carries one but no
// principal.
func Authorize(ctx context.Context, procedure, jobID, owner string) error {
	a, ok := ctx.Value(authorizerKey{}).(Authorizer)
	if !ok || a == nil {
		return nil
	}
	p, ok := FromContext(ctx)
	if !ok {
		return fmt.Errorf("%w: the call is not authenticated", ErrDenied)
	}
	return a.Authorize(ctx, Request{Principal: p, Procedure: procedure, JobID: jobID, Owner: owner})
}

// Authorizing tells whether ctx carries an Authorizer: whether a handler
// must look up what Authorize needs (a job's owner).
func Authorizing(ctx context.Context) bool {
	a, ok := ctx.Value(authorizerKey{}).(Authorizer)
	return ok && a != nil
}

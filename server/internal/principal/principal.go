// Package principal carries the authenticated caller of a public RPC in
// the call's context: the authentication interceptor puts it there, and
// authorization, limits, logs and spans read it.
package principal

import "context"

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

// Package auth authenticates and authorizes the callers of the public
// API (DispatcherService). An Authenticator checks a bearer token: a
// static token from a token file (reloaded when the file changes), or a
// JWT verified against a JWKS file or an OpenID Connect issuer's keys
// (discovered from the issuer's URL, fetched and rotated by go-oidc);
// Interceptor, a connect interceptor on the handler side, puts the
// principal it finds in the call's context (package principal), on the
// call's span and in the call's log line, and refuses a call without a
// valid token with UNAUTHENTICATED. Policy is the built-in authorization
// policy, read from a YAML file, that the handlers consult through
// principal.Authorize once they know a job's owner.
//
// It does not decide what a call does, nor limit calls: the handlers and
// the limits read the principal it sets.
package auth

package auth

import "errors"

// ErrUnauthenticated is wrapped by every error of Authenticate: the
// token is missing, malformed, unknown, expired or not for this server.
// The wrapped detail (never the token) is for the server's log, not for
// the caller.
var ErrUnauthenticated = errors.New("auth: no valid credentials")

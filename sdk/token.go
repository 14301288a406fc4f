package sdk

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
)

// TokenEnv is the environment variable from which the jobplane CLI takes
// a bearer token when no flag gives one; TokenFileEnv names a file that
// holds one. The SDK itself reads neither: pass WithToken or
// WithTokenFile.
const (
	TokenEnv     = "JOBPLANE_TOKEN"
	TokenFileEnv = "JOBPLANE_TOKEN_FILE"
)

// WithToken makes the Client send token as a bearer token
// ("Authorization: Bearer TOKEN") on every call, for servers that
// authenticate their clients: a static token or a JWT. Default: no
// token. The last of WithToken and WithTokenFile wins.
func WithToken(token string) Option {
	token = strings.TrimSpace(token)
	return func(o *options) {
		o.token = func(context.Context) (string, error) { return token, nil }
	}
}

// WithTokenFile makes the Client send the token held in the file at path
// (its content, spaces and line ends around it trimmed) as a bearer
// token on every call. The file is read on the first call, and read again
// when its size or modification time changes, so that a token renewed in
// place (a short-lived JWT written by an agent, say) is sent from the
// next call on. A call whose token file cannot be read fails with the
// reading's error, not sent. Default: no token.
func WithTokenFile(path string) Option {
	f := &tokenFile{path: path}
	return func(o *options) { o.token = f.token }
}

// tokenFile reads a token file, again when it changes.
type tokenFile struct {
	path string

	mu    sync.Mutex
	mod   time.Time
	size  int64
	value string
	read  bool
}

func (f *tokenFile) token(context.Context) (string, error) {
	st, err := os.Stat(f.path)
	if err != nil {
		return "", fmt.Errorf("sdk: token file: %w", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.read && st.ModTime().Equal(f.mod) && st.Size() == f.size {
		return f.value, nil
	}
	data, err := os.ReadFile(f.path)
	if err != nil {
		return "", fmt.Errorf("sdk: token file: %w", err)
	}
	value := strings.TrimSpace(string(data))
	if value == "" {
		return "", fmt.Errorf("sdk: token file %s is empty", f.path)
	}
	f.value, f.mod, f.size, f.read = value, st.ModTime(), st.Size(), true
	return value, nil
}

// tokenInterceptor sets the Authorization header of every call from a
// token source.
type tokenInterceptor struct {
	token func(context.Context) (string, error)
}

func (t tokenInterceptor) set(ctx context.Context, h http.Header) error {
	tok, err := t.token(ctx)
	if err != nil {
		return err
	}
	if tok == "" {
		return errors.New("sdk: the token is empty")
	}
	h.Set("Authorization", "Bearer "+tok)
	return nil
}

func (t tokenInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if err := t.set(ctx, req.Header()); err != nil {
			return nil, err
		}
		return next(ctx, req)
	}
}

func (t tokenInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		tok, err := t.token(ctx)
		if err == nil && tok == "" {
			err = errors.New("sdk: the token is empty")
		}
		if err != nil {
			// Nothing is sent: the stream fails as it starts.
			return &failedConn{spec: spec, err: err, header: http.Header{}}
		}
		conn := next(ctx, spec)
		conn.RequestHeader().Set("Authorization", "Bearer "+tok)
		return conn
	}
}

func (t tokenInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// failedConn is a stream that fails before anything is sent, with err.
type failedConn struct {
	spec   connect.Spec
	header http.Header
	err    error
}

func (c *failedConn) Spec() connect.Spec           { return c.spec }
func (c *failedConn) Peer() connect.Peer           { return connect.Peer{} }
func (c *failedConn) Send(any) error               { return c.err }
func (c *failedConn) RequestHeader() http.Header   { return c.header }
func (c *failedConn) CloseRequest() error          { return nil }
func (c *failedConn) Receive(any) error            { return c.err }
func (c *failedConn) ResponseHeader() http.Header  { return http.Header{} }
func (c *failedConn) ResponseTrailer() http.Header { return http.Header{} }
func (c *failedConn) CloseResponse() error         { return nil }

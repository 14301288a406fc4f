// Package framing checks the envelopes of enveloped requests (gRPC,
// gRPC-Web and the Connect protocol's streaming form) before a connect
// handler reads them, so that a malformed one is answered with
// INVALID_ARGUMENT: connect-go itself answers a truncated envelope with
// INTERNAL, a compressed one without an encoding with INTERNAL, and a
// unary call with no or two messages with UNIMPLEMENTED, which would say
// the server failed where the request did.
//
// Every procedure of jobplane's contract takes exactly one request
// message (unary and server-streaming calls only), which is what Strict
// demands. It must not wrap a handler of client or bidi streams.
package framing

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"connectrpc.com/connect"
)

// maxBuffered bounds the body Strict reads ahead to check. A larger body
// goes to the handler unchecked: the endpoint's request limit
// (endpoint.Config.MaxRequestBytes) is far below it and refuses it first.
const maxBuffered = 64 << 20

// Strict wraps h, a connect handler whose procedures each take one
// request message, so that an enveloped request whose body is not exactly
// one complete envelope (flags 0, or 1 with a compression named) is
// answered with INVALID_ARGUMENT in the request's protocol, before h sees
// it. Other requests, and enveloped ones that are well framed, go to h
// unchanged.
func Strict(h http.Handler) http.Handler {
	ew := connect.NewErrorWriter()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		encoding, ok := envelopedEncoding(r)
		if !ok || r.Body == nil {
			h.ServeHTTP(w, r)
			return
		}
		var buf bytes.Buffer
		n, err := io.Copy(&buf, io.LimitReader(r.Body, maxBuffered))
		switch {
		case err != nil || n == maxBuffered:
			// A read error (the endpoint's limit, a client gone) or a body
			// too large to check: the handler reads on from here, and
			// answers the error as it would have.
			rest := r.Body
			if err != nil {
				rest = io.NopCloser(errReader{err})
			}
			r.Body = readCloser{io.MultiReader(&buf, rest), r.Body}
		default:
			if problem := check(buf.Bytes(), encoding != "" && encoding != "identity"); problem != "" {
				_ = ew.Write(w, r, connect.NewError(connect.CodeInvalidArgument, errors.New("protocol error: "+problem)))
				return
			}
			r.Body = readCloser{&buf, r.Body}
		}
		h.ServeHTTP(w, r)
	})
}

// envelopedEncoding reports whether r's body is enveloped, and the
// compression its envelopes may use.
func envelopedEncoding(r *http.Request) (encoding string, ok bool) {
	ct := strings.ToLower(r.Header.Get("Content-Type"))
	switch {
	case strings.HasPrefix(ct, "application/grpc"): // also grpc-web
		return r.Header.Get("Grpc-Encoding"), true
	case strings.HasPrefix(ct, "application/connect+"):
		return r.Header.Get("Connect-Content-Encoding"), true
	}
	return "", false
}

// check says what is wrong with the framing of body, which must be one
// complete envelope; "" if nothing is.
func check(body []byte, compressed bool) string {
	if len(body) == 0 {
		return "no request message"
	}
	if len(body) < 5 {
		return fmt.Sprintf("incomplete envelope: %d bytes of its 5-byte prefix", len(body))
	}
	flags, size := body[0], binary.BigEndian.Uint32(body[1:5])
	switch {
	case flags == 1 && !compressed:
		return "a compressed message without a compression named"
	case flags > 1:
		return fmt.Sprintf("envelope flags %#x in a request", flags)
	case uint64(len(body)-5) < uint64(size):
		return fmt.Sprintf("the envelope promises %d bytes, %d came", size, len(body)-5)
	case uint64(len(body)-5) > uint64(size):
		return "more than one request message"
	}
	return ""
}

// errReader fails every read with err.
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// readCloser reads from r and closes c.
type readCloser struct {
	io.Reader
	c io.Closer
}

func (rc readCloser) Close() error { return rc.c.Close() }

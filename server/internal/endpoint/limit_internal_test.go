package endpoint

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A body whose declared length is over the limit is answered
// RESOURCE_EXHAUSTED in the request's protocol without a byte of it read,
// and without the handler being called.
func TestDeclaredOversizedBodyIsNotRead(t *testing.T) {
	const limit = 1 << 10
	for _, tc := range []struct {
		contentType string
		wantStatus  int
		grpcStatus  string // the Grpc-Status header, for gRPC and gRPC-Web
	}{
		{"application/proto", http.StatusTooManyRequests, ""},
		{"application/json", http.StatusTooManyRequests, ""},
		{"application/grpc", http.StatusOK, "8"},
		{"application/grpc-web+proto", http.StatusOK, "8"},
	} {
		t.Run(tc.contentType, func(t *testing.T) {
			body := &readCounter{}
			r := httptest.NewRequest(http.MethodPost, "/some.v1.Service/Method", body)
			r.ContentLength = limit + 1
			r.Header.Set("Content-Type", tc.contentType)
			if strings.HasPrefix(tc.contentType, "application/grpc") {
				r.ProtoMajor = 2
			}
			w := httptest.NewRecorder()
			called := false
			limitBody(limit, http.HandlerFunc(func(http.ResponseWriter, *http.Request) { called = true })).ServeHTTP(w, r)
			if called {
				t.Error("the handler was called")
			}
			if body.n != 0 {
				t.Errorf("%d bytes of the body were read, want 0", body.n)
			}
			if w.Code != tc.wantStatus {
				t.Errorf("HTTP status = %d, want %d", w.Code, tc.wantStatus)
			}
			if tc.grpcStatus != "" {
				if got := w.Header().Get("Grpc-Status"); got != tc.grpcStatus {
					t.Errorf("Grpc-Status = %q, want %q", got, tc.grpcStatus)
				}
				return
			}
			var wire struct{ Code, Message string }
			if err := json.Unmarshal(w.Body.Bytes(), &wire); err != nil || wire.Code != "resource_exhausted" {
				t.Errorf("Connect error body %q (%v), want code resource_exhausted", w.Body, err)
			}
		})
	}
}

// A body within the limit reaches the handler whole.
func TestBodyWithinLimitIsServed(t *testing.T) {
	const limit = 1 << 10
	r := httptest.NewRequest(http.MethodPost, "/some.v1.Service/Method", strings.NewReader(strings.Repeat("x", limit)))
	var got int
	limitBody(limit, http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("read: %v", err)
		}
		got = len(b)
	})).ServeHTTP(httptest.NewRecorder(), r)
	if got != limit {
		t.Errorf("handler read %d bytes, want %d", got, limit)
	}
}

// readCounter is an endless body that counts what is read from it.
type readCounter struct{ n int }

func (r *readCounter) Read(p []byte) (int, error) {
	r.n += len(p)
	return len(p), nil
}

package framing

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A well-framed request reaches the handler with its body intact; a
// malformed one is answered with INVALID_ARGUMENT in its protocol and
// never reaches it; requests that are not enveloped pass untouched.
func TestStrict(t *testing.T) {
	t.Parallel()
	one := []byte{0, 0, 0, 0, 2, 8, 1}
	cases := []struct {
		name, contentType string
		header            map[string]string
		body              []byte
		reach             bool
		status, grpc      string // what the answer says, when refused
	}{
		{"grpc, one message", "application/grpc", nil, one, true, "", ""},
		{"grpc, empty", "application/grpc", nil, nil, false, "", "3"},
		{"grpc, short prefix", "application/grpc+proto", nil, []byte{0, 0, 0}, false, "", "3"},
		{"grpc, truncated", "application/grpc", nil, []byte{0, 0, 0, 0, 9, 1}, false, "", "3"},
		{"grpc, two messages", "application/grpc", nil, append(append([]byte{}, one...), one...), false, "", "3"},
		{"grpc, compressed without encoding", "application/grpc", nil, []byte{1, 0, 0, 0, 0}, false, "", "3"},
		{"grpc, compressed with gzip", "application/grpc", map[string]string{"Grpc-Encoding": "gzip"}, []byte{1, 0, 0, 0, 0}, true, "", ""},
		{"grpc, unknown flags", "application/grpc", nil, []byte{0x80, 0, 0, 0, 0}, false, "", "3"},
		{"grpc-web, truncated", "application/grpc-web+proto", nil, []byte{0, 0, 0, 0, 9}, false, "", "3"},
		{"connect streaming, truncated", "application/connect+json", nil, []byte{0, 0, 0, 0, 9}, false, "200", ""},
		{"connect unary", "application/proto", nil, []byte{0xff}, true, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var got []byte
			reached := false
			h := Strict(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				reached = true
				buf := new(bytes.Buffer)
				_, _ = buf.ReadFrom(r.Body)
				got = buf.Bytes()
			}))
			req := httptest.NewRequest(http.MethodPost, "/s/M", bytes.NewReader(tc.body))
			req.Header.Set("Content-Type", tc.contentType)
			for k, v := range tc.header {
				req.Header.Set(k, v)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if reached != tc.reach {
				t.Fatalf("reached the handler: %v, want %v", reached, tc.reach)
			}
			if tc.reach {
				if !bytes.Equal(got, tc.body) {
					t.Errorf("the handler read %x, want %x", got, tc.body)
				}
				return
			}
			if tc.grpc != "" && rec.Header().Get("Grpc-Status") != tc.grpc {
				t.Errorf("grpc-status %q, want %q (headers %v)", rec.Header().Get("Grpc-Status"), tc.grpc, rec.Header())
			}
			if tc.status != "" && !strings.Contains(rec.Body.String(), `"code":"invalid_argument"`) {
				t.Errorf("body %q, want an invalid_argument end of stream", rec.Body.String())
			}
		})
	}
}

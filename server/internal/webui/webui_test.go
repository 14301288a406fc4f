package webui

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/fstest"
)

func get(t *testing.T, h http.Handler, path string, header ...string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// The page's files are served under Path with their types, a content
// security policy that allows nothing but the page's own origin, and an
// ETag that the browser must check: an unchanged file is answered 304,
// a changed one in full.
func TestHandlerServesThePage(t *testing.T) {
	h := handler(fstest.MapFS{
		"index.html": {Data: []byte("<!doctype html><title>jobplane</title>")},
		"app.js":     {Data: []byte("console.log(1)")},
		"app.css":    {Data: []byte("body{}")},
		"README.md":  {Data: []byte("not served")},
	})
	for path, want := range map[string]string{"/ui/": "text/html", "/ui/index.html": "text/html", "/ui/app.js": "javascript", "/ui/app.css": "text/css"} {
		rec := get(t, h, path)
		if rec.Code != http.StatusOK || !strings.Contains(rec.Header().Get("Content-Type"), want) {
			t.Errorf("GET %s: %d %q, want 200 and a type with %q", path, rec.Code, rec.Header().Get("Content-Type"), want)
		}
		if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "connect-src 'self'") {
			t.Errorf("GET %s: Content-Security-Policy %q", path, csp)
		}
		if rec.Header().Get("Cache-Control") != "no-cache" || rec.Header().Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: headers %v", path, rec.Header())
		}
	}
	for _, path := range []string{"/ui/README.md", "/ui/nothing.js", "/ui/../webui.go"} {
		if rec := get(t, h, path); rec.Code != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", path, rec.Code)
		}
	}
	etag := get(t, h, "/ui/app.js").Header().Get("ETag")
	if etag == "" {
		t.Fatal("app.js has no ETag")
	}
	if rec := get(t, h, "/ui/app.js", "If-None-Match", etag); rec.Code != http.StatusNotModified {
		t.Errorf("GET app.js with its ETag: %d, want 304", rec.Code)
	}
	if rec := get(t, h, "/ui/app.js", "If-None-Match", `"another"`); rec.Code != http.StatusOK || rec.Body.String() != "console.log(1)" {
		t.Errorf("GET app.js with another ETag: %d %q, want 200 and the file", rec.Code, rec.Body.String())
	}
	if a, b := etag, get(t, h, "/ui/app.css").Header().Get("ETag"); a == b {
		t.Errorf("two files share the ETag %s", a)
	}
}

// A binary built without the page answers with one that says how to build
// it, rather than a 404 that would look like a wrong address.
func TestHandlerWithoutThePageSaysHowToBuildIt(t *testing.T) {
	h := handler(fstest.MapFS{"README.md": {Data: []byte("x")}})
	rec := get(t, h, "/ui/")
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "make ui") {
		t.Errorf("GET /ui/ without the page: %d %q", rec.Code, rec.Body.String())
	}
}

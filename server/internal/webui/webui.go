// Package webui serves the dashboard: the single page that ui/ builds
// (index.html, app.js, app.css), embedded in the binary, under /ui/ on a
// JobManager's public port. The page holds no data and needs no
// credentials: it calls the public DispatcherService, which checks the
// caller as it checks any client.
//
// `make ui` builds the page into assets/ before the binary is built. A
// binary built without it (go build on a checkout where it was never
// run) serves a page that says so.
package webui

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"
)

//go:embed assets
var assets embed.FS

// Path is where the dashboard is served.
const Path = "/ui/"

// contentSecurityPolicy lets the page load its own script and style and
// call its own origin, and nothing else: no inline script, no framing.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// notBuilt is the page of a binary built without the dashboard.
const notBuilt = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>jobplane</title></head>
<body><h1>The dashboard was not built into this binary</h1>
<p>Run <code>make ui</code> (it needs node and npm) before building jobplane, or build it with <code>make bins</code>.
The API on this port works without it.</p></body></html>
`

// file is one asset, read once.
type file struct {
	name string
	data []byte
	etag string
}

// Handler serves the dashboard under Path: Path itself is index.html, and
// every other file of the page by its name. Answers carry an ETag and ask
// the browser to check it before reusing them, so a new binary's page is
// never mixed with an old one's.
func Handler() http.Handler {
	sub, _ := fs.Sub(assets, "assets")
	return handler(sub)
}

// handler serves the page whose files fsys holds.
func handler(fsys fs.FS) http.Handler {
	files := make(map[string]*file)
	_ = fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || path.Base(p) == "README.md" {
			return err
		}
		data, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(data)
		files[p] = &file{name: p, data: data, etag: `"` + hex.EncodeToString(sum[:12]) + `"`}
		return nil
	})
	if files["index.html"] == nil {
		files = map[string]*file{"index.html": {name: "index.html", data: []byte(notBuilt)}}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(r.URL.Path, Path)
		if name == "" {
			name = "index.html"
		}
		f := files[name]
		if f == nil {
			http.NotFound(w, r)
			return
		}
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		if f.etag != "" {
			h.Set("ETag", f.etag)
		}
		http.ServeContent(w, r, f.name, time.Time{}, bytes.NewReader(f.data))
	})
}

// Redirect sends a browser that asks for the root of the port to the
// dashboard.
func Redirect() http.Handler {
	return http.RedirectHandler(Path, http.StatusFound)
}

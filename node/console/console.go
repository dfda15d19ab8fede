// Package console is the daemon's read-only web console: a few HTML pages,
// one style sheet and one script, embedded in the binary and served as
// they are (no build step, no framework, nothing fetched from elsewhere).
// The script reads the control API's read-only views (GET /v1/...) from
// the listener that serves it and draws them, charts as SVG; the daemon
// serves both on its loopback metrics listener. Every figure a page shows
// carries a data-field attribute naming the JSON field it comes from, so
// that tests (and scrapers) can compare it with the API.
package console

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"
)

//go:embed static
var static embed.FS

// CSP is the console's Content-Security-Policy: its own files only (so no
// inline script or style: what a job, a peer or a log says can only ever
// be text), in no frame, with no form or base to redirect.
const CSP = "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"

// files are the console's files (index.html, console.js...).
func files() fs.FS {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the directory is embedded above
	}
	return sub
}

// Handler serves the console's files, to GET and HEAD only: the console
// changes nothing. "/" is the overview.
func Handler() http.Handler {
	serve := http.FileServerFS(files())
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "the console is read-only", http.StatusMethodNotAllowed)
			return
		}
		h := w.Header()
		h.Set("Content-Security-Policy", CSP)
		h.Set("X-Content-Type-Options", "nosniff")
		// Links carry the listener's token (?token=) when it has one.
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		serve.ServeHTTP(w, r)
	})
}

// Public reports whether r asks for one of the console's own files (GET
// or HEAD). They are the same in every binary and hold no data, so a
// listener that requires a token serves them without it: a page loaded
// with ?token= could not pass it on to its script and style sheet, and
// its script sends the token with every call for data.
func Public(r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	name := strings.TrimPrefix(r.URL.Path, "/")
	if name == "" {
		name = "index.html"
	}
	if !fs.ValidPath(name) {
		return false
	}
	fi, err := fs.Stat(files(), name)
	return err == nil && !fi.IsDir()
}

// Site is the console as the metrics listener serves it (its Console):
// the pages at /, and at /v1/ the read-only views they read, which Views
// registers (told whether the listener requires a token).
type Site struct {
	Views func(mux *http.ServeMux, tokened bool)
}

// Routes registers the views and the pages on mux.
func (s Site) Routes(mux *http.ServeMux, tokened bool) {
	s.Views(mux, tokened)
	mux.Handle("/", Handler())
}

// Public says which requests are the console's own files (they hold no
// data).
func (Site) Public(r *http.Request) bool { return Public(r) }

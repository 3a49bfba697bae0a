package admin

import (
	"embed"
	"net/http"
	"path"
	"strings"
)

// uiFiles are the dashboard's static files (internal/admin/ui/README.md):
// levee's own page, script and styles and the vendored uPlot, nothing
// fetched from elsewhere at run time.
//
//go:embed ui/index.html ui/app.js ui/style.css ui/favicon.svg ui/vendor/uPlot.iife.min.js ui/vendor/uPlot.min.css
var uiFiles embed.FS

// uiCSP is the dashboard's Content-Security-Policy: scripts, styles and
// the event stream from the admin listener itself, and nothing else; no
// inline script or style attribute, no eval, no frames, no forms. Styles
// set through the CSSOM (element.style, as uPlot does) are not inline
// styles and stay allowed.
const uiCSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// uiType is the Content-Type of a file served, by its name's extension;
// false for any other kind, which is not served.
func uiType(name string) (string, bool) {
	switch path.Ext(name) {
	case ".html":
		return "text/html; charset=utf-8", true
	case ".js":
		return "text/javascript; charset=utf-8", true
	case ".css":
		return "text/css; charset=utf-8", true
	case ".svg":
		return "image/svg+xml", true
	}
	return "", false
}

// registerUI serves the dashboard at GET /ui/ and redirects /ui there,
// keeping the query (?app=NAME&by=&window=).
func registerUI(mux *http.ServeMux) {
	mux.HandleFunc("GET /ui", func(w http.ResponseWriter, r *http.Request) {
		to := "/ui/"
		if r.URL.RawQuery != "" {
			to += "?" + r.URL.RawQuery
		}
		http.Redirect(w, r, to, http.StatusMovedPermanently)
	})
	mux.HandleFunc("GET /ui/", serveUI)
}

// serveUI answers one of uiFiles, or 404; every answer carries the
// dashboard's security headers.
func serveUI(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", uiCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	name := strings.TrimPrefix(r.URL.Path, "/ui/")
	if name == "" {
		name = "index.html"
	}
	ct, ok := uiType(name)
	if !ok {
		http.NotFound(w, r)
		return
	}
	// ReadFile refuses names that are not valid fs paths ("..", "./x").
	b, err := uiFiles.ReadFile("ui/" + name)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	h.Set("Content-Type", ct)
	w.Write(b)
}

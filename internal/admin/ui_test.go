package admin

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func uiServer(t *testing.T, api API) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(Handler(Options{Registry: prometheus.NewRegistry(), Addr: "127.0.0.1:0", API: api}))
	t.Cleanup(srv.Close)
	return srv
}

func uiGet(t *testing.T, url string) (*http.Response, string) {
	t.Helper()
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// TestUIFilesAndHeaders: each file the page loads is served with its type
// and the dashboard's security headers; nothing else under /ui/ is.
func TestUIFilesAndHeaders(t *testing.T) {
	srv := uiServer(t, staticAPI{})
	for path, want := range map[string]string{
		"/ui/":                         "text/html; charset=utf-8",
		"/ui/index.html":               "text/html; charset=utf-8",
		"/ui/app.js":                   "text/javascript; charset=utf-8",
		"/ui/style.css":                "text/css; charset=utf-8",
		"/ui/vendor/uPlot.iife.min.js": "text/javascript; charset=utf-8",
		"/ui/vendor/uPlot.min.css":     "text/css; charset=utf-8",
		"/ui/favicon.svg":              "image/svg+xml",
	} {
		resp, body := uiGet(t, srv.URL+path)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != want || len(body) == 0 {
			t.Errorf("GET %s = %d %q (%d bytes); want 200 %q", path, resp.StatusCode, resp.Header.Get("Content-Type"), len(body), want)
		}
		for k, v := range map[string]string{
			"Content-Security-Policy": uiCSP,
			"X-Content-Type-Options":  "nosniff",
			"X-Frame-Options":         "DENY",
			"Cache-Control":           "no-store",
		} {
			if got := resp.Header.Get(k); got != v {
				t.Errorf("GET %s: %s %q, want %q", path, k, got, v)
			}
		}
	}
	for _, path := range []string{"/ui/nope.js", "/ui/README.md", "/ui/vendor/LICENSE.uPlot", "/ui/vendor/", "/ui/ui.go"} {
		if resp, _ := uiGet(t, srv.URL+path); resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s = %d, want 404", path, resp.StatusCode)
		}
	}
	// ServeMux cleans paths before serveUI sees them; serveUI refuses
	// unclean ones all the same.
	for _, path := range []string{"/ui/../admin.go", "/ui/./app.js", "/ui//app.js"} {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.URL.Path = path
		if serveUI(w, r); w.Code != http.StatusNotFound {
			t.Errorf("serveUI %s = %d, want 404", path, w.Code)
		}
	}
	resp, _ := uiGet(t, srv.URL+"/ui?app=a&by=bytes")
	if resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "/ui/?app=a&by=bytes" {
		t.Errorf("GET /ui = %d Location %q; want 301 to /ui/ with the query", resp.StatusCode, resp.Header.Get("Location"))
	}
}

// TestUICSPIsStrict: the policy allows nothing but this origin, no inline
// code and no eval; the page itself needs none.
func TestUICSPIsStrict(t *testing.T) {
	for _, bad := range []string{"unsafe-inline", "unsafe-eval", "unsafe-hashes", "*", "data:", "http:", "https:"} {
		if strings.Contains(uiCSP, bad) {
			t.Errorf("CSP %q allows %s", uiCSP, bad)
		}
	}
	for _, need := range []string{"default-src 'self'", "script-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"} {
		if !strings.Contains(uiCSP, need) {
			t.Errorf("CSP %q lacks %s", uiCSP, need)
		}
	}
	page, err := uiFiles.ReadFile("ui/index.html")
	if err != nil {
		t.Fatal(err)
	}
	inline := regexp.MustCompile(`(?i)<script(?:\s[^>]*)?>\s*[^<\s]|<style|\sstyle=|\son[a-z]+=|javascript:`)
	if m := inline.Find(page); m != nil {
		t.Errorf("index.html has inline code or style the CSP refuses: %q", m)
	}
	src := regexp.MustCompile(`(?:src|href)="([^"]+)"`)
	for _, m := range src.FindAllSubmatch(page, -1) {
		if _, err := uiFiles.ReadFile("ui/" + string(m[1])); err != nil {
			t.Errorf("index.html loads %s, which is not embedded: %v", m[1], err)
		}
	}
	js, _ := uiFiles.ReadFile("ui/app.js")
	if m := regexp.MustCompile(`innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function`).Find(js); m != nil {
		t.Errorf("app.js uses %s: data must reach the page as text", m)
	}
}

// TestUINeedsTheAPIAndTheHost: no API, no dashboard; and the Host check
// guards it as every admin endpoint.
func TestUINeedsTheAPIAndTheHost(t *testing.T) {
	if resp, _ := uiGet(t, uiServer(t, nil).URL+"/ui/"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("without an API: GET /ui/ = %d, want 404", resp.StatusCode)
	}
	req, _ := http.NewRequest(http.MethodGet, uiServer(t, staticAPI{}).URL+"/ui/", nil)
	req.Host = "evil.example"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMisdirectedRequest {
		t.Errorf("Host evil.example: GET /ui/ = %d, want 421", resp.StatusCode)
	}
}

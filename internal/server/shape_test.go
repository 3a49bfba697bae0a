package server

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// bodyBackend records the bodies it receives in full.
type bodyBackend struct {
	*httptest.Server
	complete atomic.Int64 // requests whose body arrived whole
	bytes    atomic.Int64
}

func newBodyBackend(t *testing.T) *bodyBackend {
	b := &bodyBackend{}
	b.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		b.bytes.Add(n)
		if err == nil {
			b.complete.Add(1)
		}
		io.WriteString(w, "ok")
	}))
	t.Cleanup(b.Close)
	return b
}

func (b *bodyBackend) addr() string { return strings.TrimPrefix(b.URL, "http://") }

// rawRequest sends one HTTP/1.1 request as written and returns the status
// line's code and the response headers and body.
func rawRequest(t *testing.T, proxyURL, req string) (int, http.Header, string) {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(proxyURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the response: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(body)
}

func shapeProxy(t *testing.T, limits string) (*proxy, *bodyBackend) {
	be := newBodyBackend(t)
	p := startProxy(t, fmt.Sprintf("apps:\n  a:\n    hosts: [a.test]\n    backends: [%s]\n    limits: %s\n", be.addr(), limits))
	return p, be
}

func TestURLAndQueryLimitsAtTheBoundary(t *testing.T) {
	p, be := shapeProxy(t, "{url_length: 40, query_values: 3}")
	get := func(target string) (int, http.Header) {
		code, h, _ := rawRequest(t, p.URL, "GET "+target+" HTTP/1.1\r\nHost: a.test\r\n\r\n")
		return code, h
	}
	at := "/" + strings.Repeat("x", 39) // 40 bytes
	if code, _ := get(at); code != 200 {
		t.Fatalf("target of exactly url_length: %d; want 200", code)
	}
	if code, h := get(at + "y"); code != 414 || h.Get("Levee-Reject") != "url-length" {
		t.Fatalf("target one byte over url_length: %d %q; want 414 url-length", code, h.Get("Levee-Reject"))
	}
	if code, _ := get("/q?a=1&b=2&c=3"); code != 200 {
		t.Fatalf("3 query values: %d; want 200", code)
	}
	if code, h := get("/q?a=1&b=2&c=3&d=4"); code != 414 || h.Get("Levee-Reject") != "query-values" {
		t.Fatalf("4 query values: %d %q; want 414 query-values", code, h.Get("Levee-Reject"))
	}
	if got := be.complete.Load(); got != 2 {
		t.Fatalf("backend served %d requests; want only the 2 within limits", got)
	}
	if got := p.metric("levee_rejected_total", map[string]string{"app": "a", "reason": "url-length"}); got != 1 {
		t.Fatalf("levee_rejected_total{reason=url-length} = %v; want 1", got)
	}
}

func TestHeaderLimitsAtTheBoundary(t *testing.T) {
	p, be := shapeProxy(t, "{header_count: 5, header_bytes: 200}")
	send := func(headers ...string) (int, http.Header) {
		code, h, _ := rawRequest(t, p.URL, "GET / HTTP/1.1\r\nHost: a.test\r\n"+strings.Join(headers, "")+"\r\n")
		return code, h
	}
	four := []string{"A: 1\r\n", "B: 2\r\n", "C: 3\r\n", "D: 4\r\n"} // with Host: 5 fields
	if code, _ := send(four...); code != 200 {
		t.Fatalf("5 header fields: %d; want 200", code)
	}
	if code, h := send(append(four, "E: 5\r\n")...); code != 431 || h.Get("Levee-Reject") != "header-count" {
		t.Fatalf("6 header fields: %d %q; want 431 header-count", code, h.Get("Levee-Reject"))
	}
	// Host (4) + a.test (6) + X (1) + value: 200 bytes exactly, then 201.
	value := strings.Repeat("v", 200-4-6-1)
	if code, _ := send("X: " + value + "\r\n"); code != 200 {
		t.Fatalf("header block of exactly header_bytes: %d; want 200", code)
	}
	if code, h := send("X: " + value + "v\r\n"); code != 431 || h.Get("Levee-Reject") != "header-bytes" {
		t.Fatalf("header block one byte over: %d %q; want 431 header-bytes", code, h.Get("Levee-Reject"))
	}
	if got := be.complete.Load(); got != 2 {
		t.Fatalf("backend served %d requests; want 2", got)
	}
}

func TestBatchItemsLimit(t *testing.T) {
	p, be := shapeProxy(t, "{batch: {json_field: uris, max: 3}}")
	post := func(body string, chunked bool) (int, http.Header, string) {
		framing := fmt.Sprintf("Content-Length: %d\r\n\r\n%s", len(body), body)
		if chunked {
			framing = fmt.Sprintf("Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(body), body)
		}
		return rawRequest(t, p.URL, "POST /batch HTTP/1.1\r\nHost: a.test\r\nContent-Type: application/json\r\n"+framing)
	}
	for _, chunked := range []bool{false, true} {
		if code, _, _ := post(`{"uris": ["a", "b", {"c": [1, 2]}], "other": [1, 2, 3, 4, 5]}`, chunked); code != 200 {
			t.Fatalf("chunked=%v: 3 items: %d; want 200", chunked, code)
		}
		code, h, body := post(`{"uris": ["a", "b", "c", "d"]}`, chunked)
		if code != 422 || h.Get("Levee-Reject") != "batch-items" {
			t.Fatalf("chunked=%v: 4 items: %d %q; want 422 batch-items", chunked, code, h.Get("Levee-Reject"))
		}
		if !strings.Contains(body, `"uris"`) || !strings.Contains(body, "3") {
			t.Fatalf("chunked=%v: 422 body %q does not name the field and the limit", chunked, body)
		}
		if code, h, _ := post(`{"uris": ["a", `, chunked); code != 400 || h.Get("Levee-Reject") != "batch-json" {
			t.Fatalf("chunked=%v: broken JSON: %d %q; want 400 batch-json", chunked, code, h.Get("Levee-Reject"))
		}
	}
	if got := be.complete.Load(); got != 2 {
		t.Fatalf("backend got %d whole bodies; want only the 2 within the limit", got)
	}
	if got := p.metric("levee_rejected_total", map[string]string{"app": "a", "reason": "batch-items"}); got != 2 {
		t.Fatalf("levee_rejected_total{reason=batch-items} = %v; want 2", got)
	}
}

// The incident: one client's 20,000-item batches. The body is cut off at
// item max+1 while streaming, so levee never reads (or forwards) the rest.
func TestHugeBatchIsCutOffWhileStreaming(t *testing.T) {
	p, be := shapeProxy(t, "{batch: {json_field: uris, max: 100}, body: 10MB}")
	items := make([]string, 20000)
	for i := range items {
		items[i] = fmt.Sprintf("%q", fmt.Sprintf("https://example.com/objects/%06d", i))
	}
	body := `{"uris": [` + strings.Join(items, ",") + `]}`
	req, _ := http.NewRequest(http.MethodPost, p.URL+"/batch", io.MultiReader(strings.NewReader(body))) // chunked
	req.Host = "a.test"
	resp, err := http.DefaultClient.Do(req)
	// levee answers 422 and closes the connection with most of the body
	// unread; the client may see that as a reset while it is still writing,
	// before it reads the answer. Either way the refusal is counted once.
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode != 422 {
			t.Fatalf("20,000-item batch: %d; want 422", resp.StatusCode)
		}
	} else if !strings.Contains(err.Error(), "reset") && !strings.Contains(err.Error(), "broken pipe") {
		t.Fatalf("20,000-item batch: %v; want 422 or a reset connection", err)
	}
	waitFor(t, "the batch refusal to be counted", func() bool {
		return p.metric("levee_rejected_total", map[string]string{"app": "a", "reason": "batch-items"}) == 1
	})
	if got := be.bytes.Load(); got > int64(len(body))/10 {
		t.Fatalf("backend received %d of %d body bytes; the cut must come near item 101", got, len(body))
	}
}

// TestPerPathShapeLimits: limits.per_path changes the shape limits under a
// prefix (on segment boundaries, longest first) and leaves the rest of the
// app on its own, for declared and chunked bodies alike.
func TestPerPathShapeLimits(t *testing.T) {
	p, be := shapeProxy(t, `
        body: 1KB
        per_path:
          /upload: {body: 1MB}
          /upload/tiny: {body: 10}
          /batch: {batch: {json_field: uris, max: 2}}
          /strict: {header_count: 3, url_length: 20}`)
	send := func(path, body string, chunked bool) (int, string) {
		framing := fmt.Sprintf("Content-Length: %d\r\n\r\n%s", len(body), body)
		if chunked {
			framing = fmt.Sprintf("Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(body), body)
		}
		code, h, _ := rawRequest(t, p.URL, "POST "+path+" HTTP/1.1\r\nHost: a.test\r\n"+framing)
		return code, h.Get("Levee-Reject")
	}
	big := strings.Repeat("x", 2000)
	batch := `{"uris": [1, 2, 3]}`
	cases := []struct {
		path, body string
		code       int
		reason     string
	}{
		{"/", big, 413, "body"},                 // the app's 1KB
		{"/upload", big, 200, ""},               // 1MB here
		{"/upload/x", big, 200, ""},             // under /upload
		{"/uploads", big, 413, "body"},          // not under /upload: segment boundary
		{"/upload/tiny", "0123456789", 200, ""}, // the longer prefix: 10 bytes
		{"/upload/tiny/y", "0123456789a", 413, "body"},
		{"/batch", batch, 422, "batch-items"},
		{"/", batch, 200, ""}, // no batch limit outside /batch
	}
	for _, chunked := range []bool{false, true} {
		for _, c := range cases {
			if code, reason := send(c.path, c.body, chunked); code != c.code || reason != c.reason {
				t.Errorf("chunked=%v POST %s (%d bytes): %d %q, want %d %q", chunked, c.path, len(c.body), code, reason, c.code, c.reason)
			}
		}
	}
	code, h, _ := rawRequest(t, p.URL, "GET /strict HTTP/1.1\r\nHost: a.test\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n")
	if code != 431 || h.Get("Levee-Reject") != "header-count" {
		t.Errorf("4 headers under /strict: %d %q, want 431 header-count", code, h.Get("Levee-Reject"))
	}
	code, h, _ = rawRequest(t, p.URL, "GET /strict/"+strings.Repeat("a", 20)+" HTTP/1.1\r\nHost: a.test\r\n\r\n")
	if code != 414 || h.Get("Levee-Reject") != "url-length" {
		t.Errorf("long URL under /strict: %d %q, want 414 url-length", code, h.Get("Levee-Reject"))
	}
	if code, _, _ := rawRequest(t, p.URL, "GET /"+strings.Repeat("a", 20)+" HTTP/1.1\r\nHost: a.test\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n"); code != 200 {
		t.Errorf("same request outside /strict: %d, want 200", code)
	}
	if got, want := be.complete.Load(), int64(2*4+1); got != want {
		t.Errorf("backend got %d whole bodies, want %d (refusals cost no backend work)", got, want)
	}
}

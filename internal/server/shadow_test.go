package server

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/clock"
	"github.com/leveeproxy/levee/internal/limits"
	"github.com/leveeproxy/levee/internal/reply"
	"github.com/leveeproxy/levee/internal/shape"
)

// shadowBackend records, in arrival order, the Levee-Shadow values (all of
// them, joined) of the requests it gets and whether their bodies came whole.
type shadowBackend struct {
	*httptest.Server
	mu     sync.Mutex
	marks  []string
	bodies []int64
}

func newShadowBackend(t *testing.T) *shadowBackend {
	b := &shadowBackend{}
	b.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			n = -1
		}
		b.mu.Lock()
		b.marks = append(b.marks, strings.Join(r.Header.Values("Levee-Shadow"), " | "))
		b.bodies = append(b.bodies, n)
		b.mu.Unlock()
		io.WriteString(w, "ok")
	}))
	t.Cleanup(b.Close)
	return b
}

func (b *shadowBackend) seen() (marks []string, bodies []int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.marks), slices.Clone(b.bodies)
}

func shadowProxy(t *testing.T, limits string) (*proxy, *clock.Fake, *shadowBackend) {
	be := newShadowBackend(t)
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	p := startProxyClock(t, fmt.Sprintf("apps:\n  a:\n    hosts: [a.test]\n    backends: [%s]\n    limits: %s\n",
		strings.TrimPrefix(be.URL, "http://"), limits), clk)
	return p, clk, be
}

// send makes one request of a.test through p and returns the response,
// its body read. body nil: none; chunked: sent without a length.
func (p *proxy) send(method, target string, body string, chunked bool, header http.Header) *http.Response {
	p.t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
		if chunked {
			r = io.MultiReader(r) // hides the length: chunked, or no content-length on HTTP/2
		}
	}
	req, _ := http.NewRequest(method, p.URL+target, r)
	req.Host = "a.test"
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		p.t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// wantShadow checks that the proxy counted n requests shadowed for reason
// and refused none for it.
func wantShadow(t *testing.T, p *proxy, reason string, n int) {
	t.Helper()
	labels := map[string]string{"app": "a", "reason": reason}
	if got := p.metric("levee_shadow_rejected_total", labels); got != float64(n) {
		t.Errorf("levee_shadow_rejected_total{reason=%s} = %v; want %d", reason, got, n)
	}
	if got := p.metric("levee_rejected_total", labels); got != 0 {
		t.Errorf("levee_rejected_total{reason=%s} = %v; want 0: a shadowed limit refuses nothing", reason, got)
	}
	if got := p.srv.view("a").Metrics.ShadowCounts()[reason]; got != uint64(n) {
		t.Errorf("ShadowCounts()[%s] = %d; want %d", reason, got, n)
	}
}

func wantMarks(t *testing.T, be *shadowBackend, want ...string) {
	t.Helper()
	if got, _ := be.seen(); !slices.Equal(got, want) {
		t.Errorf("the backend saw Levee-Shadow %q; want %q", got, want)
	}
}

// The burst passes unmarked; every request past it reaches the backend
// marked, and spends nothing: at the next slot exactly one passes clean.
func TestShadowRateAtTheBoundary(t *testing.T) {
	p, clk, be := shadowProxy(t, "{rate: 10/s, burst: 5, shadow: [rate]}")
	for i := range 8 {
		if r := p.getAs(""); r.StatusCode != 200 || r.Header.Get("Levee-Shadow") != "" || r.Header.Get(reply.Reject) != "" {
			t.Fatalf("request %d: %d shadow %q reject %q; want a plain 200", i+1, r.StatusCode,
				r.Header.Get("Levee-Shadow"), r.Header.Get(reply.Reject))
		}
	}
	clk.Advance(100 * time.Millisecond)
	p.getAs("")
	p.getAs("")
	wantMarks(t, be, "", "", "", "", "", "rate", "rate", "rate", "", "rate")
	wantShadow(t, p, "rate", 4)
	// The API shows them beside the real refusals, of which there are none.
	clk.Advance(time.Second)
	if d, _ := p.srv.Table().App("a"); d.Shadowed["rate"] != 0.4 || len(d.Rejected) != 0 {
		t.Fatalf("API: shadowed %v, rejected %v; want 0.4 rate/s shadowed and no refusals", d.Shadowed, d.Rejected)
	}
}

func TestShadowClientRateAtTheBoundary(t *testing.T) {
	p, _, be := shadowProxy(t, "{client: {key: header:X-Api-Key, rate: 1/s, burst: 2}, shadow: [client-rate]}")
	for _, key := range []string{"k1", "k1", "k1", "k2", "k1"} {
		if r := p.getAs(key); r.StatusCode != 200 {
			t.Fatalf("%s: %d; want 200", key, r.StatusCode)
		}
	}
	wantMarks(t, be, "", "", "client-rate", "", "client-rate")
	wantShadow(t, p, "client-rate", 2)
}

// limits.body shadowed, one byte over, on the declared length and on a
// body of unknown length read ahead: both reach the backend whole.
func TestShadowBodyAtTheBoundary(t *testing.T) {
	p, _, be := shadowProxy(t, "{body: 10, shadow: [body]}")
	for _, chunked := range []bool{false, true} {
		for _, body := range []string{"0123456789", "0123456789x"} {
			if r := p.send(http.MethodPost, "/", body, chunked, nil); r.StatusCode != 200 {
				t.Fatalf("chunked=%v, %d bytes: %d; want 200", chunked, len(body), r.StatusCode)
			}
		}
	}
	wantMarks(t, be, "", "body", "", "body")
	if _, bodies := be.seen(); !slices.Equal(bodies, []int64{10, 11, 10, 11}) {
		t.Errorf("the backend got bodies of %v bytes; want them whole, [10 11 10 11]", bodies)
	}
	wantShadow(t, p, "body", 2)
}

// A list shadows only what it names: body is still refused.
func TestShadowListEnforcesTheRest(t *testing.T) {
	p, _, be := shadowProxy(t, "{rate: 10/s, burst: 1, body: 10, shadow: [rate]}")
	if r := p.send(http.MethodPost, "/", "0123456789x", false, nil); r.StatusCode != http.StatusRequestEntityTooLarge ||
		r.Header.Get(reply.Reject) != "body" {
		t.Fatalf("11 bytes: %d %q; want 413 body", r.StatusCode, r.Header.Get(reply.Reject))
	}
	if r := p.send(http.MethodPost, "/", "0123456789x", true, nil); r.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("11 bytes, no length: %d; want 413", r.StatusCode)
	}
	if got := p.metric("levee_rejected_total", map[string]string{"app": "a", "reason": "body"}); got != 2 {
		t.Errorf("levee_rejected_total{reason=body} = %v; want 2", got)
	}
	if r := p.getAs(""); r.StatusCode != 200 {
		t.Fatalf("GET past the rate: %d; want 200 (shadowed)", r.StatusCode)
	}
	wantMarks(t, be, "rate")
	// The first POST spent the burst (rate comes before body, as when
	// enforced); the second was over the rate too, then refused for body.
	wantShadow(t, p, "rate", 2)
}

func TestShadowBatchItemsAtTheBoundary(t *testing.T) {
	p, _, be := shadowProxy(t, "{batch: {json_field: uris, max: 3}, shadow: true}")
	for _, body := range []string{`{"uris": ["a", "b", "c"]}`, `{"uris": ["a", "b", "c", "d"]}`, `{"uris": [`} {
		if r := p.send(http.MethodPost, "/", body, false, nil); r.StatusCode != 200 {
			t.Fatalf("%s: %d; want 200", body, r.StatusCode)
		}
	}
	wantMarks(t, be, "", "batch-items", "batch-json")
	wantShadow(t, p, "batch-items", 1)
	wantShadow(t, p, "batch-json", 1)
}

// A list shadowing batch-items still refuses a body that is not JSON.
func TestShadowBatchItemsOnlyStillRefusesBadJSON(t *testing.T) {
	p, _, be := shadowProxy(t, "{batch: {json_field: uris, max: 3}, shadow: [batch-items]}")
	if r := p.send(http.MethodPost, "/", `{"uris": [`, false, nil); r.StatusCode != 400 || r.Header.Get(reply.Reject) != "batch-json" {
		t.Fatalf("broken JSON: %d %q; want 400 batch-json", r.StatusCode, r.Header.Get(reply.Reject))
	}
	if r := p.send(http.MethodPost, "/", `{"uris": [1, 2, 3, 4]}`, false, nil); r.StatusCode != 200 {
		t.Fatalf("4 items: %d; want 200", r.StatusCode)
	}
	// Over HTTP/2 the refused body is counted as it streams to the backend,
	// which gets its start, never all of it.
	marks, bodies := be.seen()
	var whole []string
	for i, n := range bodies {
		if n >= 0 {
			whole = append(whole, marks[i])
		}
	}
	if !slices.Equal(whole, []string{"batch-items"}) {
		t.Errorf("the backend got whole bodies marked %q; want [batch-items]", whole)
	}
}

// Shape limits shadowed at their boundaries; several reasons are named in
// path order.
func TestShadowShapeAtTheBoundary(t *testing.T) {
	p, _, be := shadowProxy(t, "{query_values: 2, header_count: 20, body: 3, shadow: true}")
	p.send(http.MethodGet, "/?a&b", "", false, nil)
	p.send(http.MethodGet, "/?a&b&c", "", false, nil)
	many := http.Header{}
	for i := range 20 {
		many.Set(fmt.Sprintf("X-H%d", i), "v")
	}
	p.send(http.MethodPost, "/?a&b&c", "four", false, many)
	wantMarks(t, be, "", "query-values", "query-values, header-count, body")
	wantShadow(t, p, "query-values", 2)
	wantShadow(t, p, "header-count", 1)
}

// Levee-Shadow is levee's: a client's never reaches the backend, with or
// without shadowed limits, and it never rides on a client's response.
func TestShadowHeaderFromTheClientIsDropped(t *testing.T) {
	p, _, be := shadowProxy(t, "{rate: 10/s, burst: 1, shadow: [rate]}")
	forged := http.Header{"Levee-Shadow": {"rate"}, "levee-shadow": {"body"}}
	p.send(http.MethodGet, "/", "", false, forged)
	r := p.send(http.MethodGet, "/", "", false, forged)
	if r.Header.Get("Levee-Shadow") != "" {
		t.Errorf("the client's response carries Levee-Shadow %q", r.Header.Get("Levee-Shadow"))
	}
	wantMarks(t, be, "", "rate")
}

// Every shadowable reason is one levee refuses with, and has its bit.
func TestShadowReasonsAreRefusalReasons(t *testing.T) {
	shapeReasons := []shape.Reason{shape.URLLength, shape.QueryValues, shape.HeaderCount, shape.HeaderBytes,
		shape.BatchItems, shape.BatchJSON, shape.BatchShape}
	for _, r := range reply.Shadowable {
		if limits.ShadowBit(r) == 0 {
			t.Errorf("%q has no bit", r)
		}
		if r != reply.Rate && r != reply.ClientRate && r != reply.Body && !slices.Contains(shapeReasons, shape.Reason(r)) {
			t.Errorf("%q is not a reason levee refuses with", r)
		}
	}
}

package server

import (
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver is an OTLP/HTTP collector that decodes each export with the
// generated OTLP protobuf types.
type otlpReceiver struct {
	mu    sync.Mutex
	spans []*tracepb.Span
	bad   []string
}

func (o *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req coltrace.ExportTraceServiceRequest
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := proto.Unmarshal(body, &req); err != nil || r.URL.Path != "/otel/v1/traces" ||
		r.Header.Get("Content-Type") != "application/x-protobuf" {
		o.bad = append(o.bad, fmt.Sprintf("%s %s: %v", r.URL.Path, r.Header.Get("Content-Type"), err))
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	for _, rs := range req.ResourceSpans {
		if rs.Resource.Attributes[0].Value.GetStringValue() != "edge" {
			o.bad = append(o.bad, "service.name "+rs.Resource.String())
		}
		for _, ss := range rs.ScopeSpans {
			o.spans = append(o.spans, ss.Spans...)
		}
	}
}

func (o *otlpReceiver) got(t *testing.T) []*tracepb.Span {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.bad) > 0 {
		t.Fatalf("bad exports: %v", o.bad)
	}
	return slices.Clone(o.spans)
}

// traceBackend records the trace headers of each request it gets.
type traceBackend struct {
	mu      sync.Mutex
	parents [][]string
	states  [][]string
}

func (b *traceBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	b.parents = append(b.parents, r.Header.Values("Traceparent"))
	b.states = append(b.states, r.Header.Values("Tracestate"))
	b.mu.Unlock()
	io.WriteString(w, "ok")
}

func tracedProxy(t *testing.T, tracing string, limits string) (*proxy, *otlpReceiver, *traceBackend) {
	t.Helper()
	rc, be := &otlpReceiver{}, &traceBackend{}
	col, backend := httptest.NewServer(rc), httptest.NewServer(be)
	t.Cleanup(col.Close)
	t.Cleanup(backend.Close)
	cfg := fmt.Sprintf("apps:\n  photos:\n    hosts: [photos.test]\n    backends: [%s]\n%s", strings.TrimPrefix(backend.URL, "http://"), limits)
	if tracing != "" {
		cfg += fmt.Sprintf("tracing: {endpoint: %s/otel, service_name: edge, %s}\n", col.URL, tracing)
	}
	return startProxy(t, cfg), rc, be
}

func tracedGet(t *testing.T, p *proxy, headers ...string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, p.URL+"/pics/1?x=y", nil)
	req.Host = "photos.test:8080"
	req.Header.Set("User-Agent", "tracetest/1")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	return tracedDo(t, req)
}

// tracedDo sends req and reads its answer.
func tracedDo(t *testing.T, req *http.Request) *http.Response {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

const clientTP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// attrs are a span's attributes, integers written out.
func attrs(sp *tracepb.Span) map[string]string {
	m := map[string]string{}
	for _, kv := range sp.Attributes {
		if _, ok := kv.Value.Value.(*commonpb.AnyValue_IntValue); ok {
			m[kv.Key] = fmt.Sprint(kv.Value.GetIntValue())
		} else {
			m[kv.Key] = kv.Value.GetStringValue()
		}
	}
	return m
}

func eventNames(sp *tracepb.Span) []string {
	var out []string
	for _, e := range sp.Events {
		out = append(out, e.Name)
	}
	return out
}

// TestTracingSpanPerRequest: one span per request with the HTTP server
// semantic conventions and the stage events; the backend's traceparent
// has the client's trace id and the exported span as its parent.
func TestTracingSpanPerRequest(t *testing.T) {
	p, rc, be := tracedProxy(t, "sample_ratio: 0", "")
	tracedGet(t, p, "Traceparent", clientTP, "Tracestate", "rojo=00f067aa0ba902b7", "Tracestate", "congo=t61rcWkgMzE")
	if err := p.Stop(); err != nil { // the exporter sends what is queued on shutdown
		t.Fatal(err)
	}
	spans := rc.got(t)
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1", len(spans))
	}
	sp := spans[0]
	be.mu.Lock()
	parents, states := be.parents[0], be.states[0]
	be.mu.Unlock()
	if len(parents) != 1 {
		t.Fatalf("backend got traceparent %q", parents)
	}
	want := "00-4bf92f3577b34da6a3ce929d0e0e4736-" + hex.EncodeToString(sp.SpanId) + "-01"
	if parents[0] != want || hex.EncodeToString(sp.TraceId) != "4bf92f3577b34da6a3ce929d0e0e4736" ||
		hex.EncodeToString(sp.ParentSpanId) != "00f067aa0ba902b7" {
		t.Fatalf("backend traceparent %s, want %s (span %x parent %x)", parents[0], want, sp.SpanId, sp.ParentSpanId)
	}
	if strings.Join(states, ",") != "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE" || sp.TraceState != "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE" {
		t.Fatalf("tracestate at the backend %q, in the span %q", states, sp.TraceState)
	}
	a := attrs(sp)
	proto := "1.1"
	if testH2C() {
		proto = "2"
	}
	for k, v := range map[string]string{"http.request.method": "GET", "url.path": "/pics/1", "url.scheme": "http",
		"server.address": "photos.test", "server.port": "8080", "network.protocol.version": proto,
		"client.address": "127.0.0.1", "user_agent.original": "tracetest/1", "http.response.status_code": "200",
		"levee.app": "photos"} {
		if a[k] != v {
			t.Errorf("%s = %q, want %q (all: %v)", k, a[k], v, a)
		}
	}
	if _, ok := a["error.type"]; ok || sp.Name != "GET photos" || sp.Kind != tracepb.Span_SPAN_KIND_SERVER || sp.Status != nil {
		t.Errorf("span %s kind %v status %v attrs %v", sp.Name, sp.Kind, sp.Status, a)
	}
	if got := strings.Join(eventNames(sp), ","); got != "shape,rate,admitted,forward" {
		t.Errorf("events %s", got)
	}
	for i, e := range sp.Events {
		if e.TimeUnixNano < sp.StartTimeUnixNano || e.TimeUnixNano > sp.EndTimeUnixNano || i > 0 && e.TimeUnixNano < sp.Events[i-1].TimeUnixNano {
			t.Errorf("event %s at %d outside the span %d..%d or out of order", e.Name, e.TimeUnixNano, sp.StartTimeUnixNano, sp.EndTimeUnixNano)
		}
	}
	if sp.Flags&0x300 != 0x300 {
		t.Errorf("flags %x: the parent is remote", sp.Flags)
	}
}

// TestTracingNewTrace: without a valid traceparent (none, two, or a bad
// one) the backend gets a new trace, and the client's tracestate is dropped.
func TestTracingNewTrace(t *testing.T) {
	p, rc, be := tracedProxy(t, "sample_ratio: 1", "")
	tracedGet(t, p, "Tracestate", "rojo=1")
	tracedGet(t, p, "Traceparent", clientTP, "Traceparent", clientTP, "Tracestate", "rojo=1")
	tracedGet(t, p, "Traceparent", strings.ToUpper(clientTP))
	tracedGet(t, p, "Traceparent", clientTP[:53]+"00", "Tracestate", "bad key=1") // unsampled parent: not exported, state dropped
	p.Stop()
	spans := rc.got(t)
	if len(spans) != 3 {
		t.Fatalf("%d spans, want 3 (the unsampled parent's is not)", len(spans))
	}
	be.mu.Lock()
	defer be.mu.Unlock()
	for i, tp := range be.parents {
		if len(tp) != 1 || len(be.states[i]) != 0 {
			t.Fatalf("request %d: backend got traceparent %q tracestate %q", i, tp, be.states[i])
		}
		if i < 3 {
			if strings.Contains(tp[0], "4bf92f3577b34da6a3ce929d0e0e4736") || !strings.HasSuffix(tp[0], "-01") ||
				tp[0] != "00-"+hex.EncodeToString(spans[i].TraceId)+"-"+hex.EncodeToString(spans[i].SpanId)+"-01" || len(spans[i].ParentSpanId) != 0 {
				t.Errorf("request %d: traceparent %s, span %x/%x", i, tp[0], spans[i].TraceId, spans[i].SpanId)
			}
		} else if !strings.HasPrefix(tp[0], "00-4bf92f3577b34da6a3ce929d0e0e4736-") || !strings.HasSuffix(tp[0], "-00") || strings.Contains(tp[0], "00f067aa0ba902b7") {
			t.Errorf("unsampled parent: backend got %s", tp[0])
		}
	}
}

// TestTracingOffPassesHeadersUnchanged: with tracing off the trace headers
// reach the backend byte for byte, and nothing is exported.
func TestTracingOffPassesHeadersUnchanged(t *testing.T) {
	p, rc, be := tracedProxy(t, "", "")
	odd := "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01" // invalid: passed on all the same
	tracedGet(t, p, "Traceparent", clientTP, "Traceparent", odd, "Tracestate", "rojo=1 ,, x", "Tracestate", "congo=2")
	p.Stop()
	be.mu.Lock()
	defer be.mu.Unlock()
	if !slices.Equal(be.parents[0], []string{clientTP, odd}) || !slices.Equal(be.states[0], []string{"rojo=1 ,, x", "congo=2"}) {
		t.Fatalf("backend got traceparent %q tracestate %q", be.parents[0], be.states[0])
	}
	if n := len(rc.got(t)); n != 0 {
		t.Fatalf("%d spans exported with tracing off", n)
	}
}

// TestTracingRefusalsBounded: a flood of refusals is traced at
// refusals_per_second, with the reason and the stages that ran.
func TestTracingRefusalsBounded(t *testing.T) {
	p, rc, _ := tracedProxy(t, "sample_ratio: 1, refusals_per_second: 5", "    limits: {rate: 1/s, burst: 1}\n")
	start := time.Now()
	codes := map[int]int{}
	for range 60 {
		codes[tracedGet(t, p).StatusCode]++
	}
	took := time.Since(start)
	p.Stop()
	if codes[http.StatusTooManyRequests] < 50 {
		t.Fatalf("codes %v: want a flood of 429s", codes)
	}
	var refused, served int
	for _, sp := range rc.got(t) {
		a := attrs(sp)
		switch a["http.response.status_code"] {
		case "429":
			refused++
			if a["levee.reject"] != "rate" || a["error.type"] != "rate" || strings.Join(eventNames(sp), ",") != "shape,rate" {
				t.Errorf("refusal span: attrs %v events %v", a, eventNames(sp))
			}
		case "200":
			served++
		}
	}
	// The burst of 5, then 5 a second for as long as the flood lasted.
	if most := 5 + int(took.Seconds()*5) + 1; refused < 5 || refused > most {
		t.Fatalf("%d refusals traced in %v, want 5..%d", refused, took, most)
	}
	if served != codes[http.StatusOK] {
		t.Fatalf("%d served spans for %d served requests", served, codes[http.StatusOK])
	}
}

// TestTracingQueuedAndBackendLimits: a request that waited for its slot
// has a queued event before admitted, and backend_limits when it is on.
func TestTracingQueuedAndBackendLimits(t *testing.T) {
	p, rc, _ := tracedProxy(t, "sample_ratio: 1", "    backend_limits: {inflight: 10}\n")
	a := p.srv.view("photos")
	if err := a.Limiter.Acquire(t.Context()); err != nil {
		t.Fatal(err)
	}
	limit := a.Limiter.Limits()
	limit.Concurrency = 1
	a.Limiter.SetLimits(limit)
	done := make(chan struct{})
	go func() { defer close(done); tracedGet(t, p) }()
	waitFor(t, "the traced request to queue", func() bool { return a.Limiter.Queued() > 0 })
	a.Limiter.Release()
	<-done
	p.Stop()
	spans := rc.got(t)
	if len(spans) != 1 || strings.Join(eventNames(spans[0]), ",") != "shape,rate,queued,admitted,backend_limits,forward" {
		t.Fatalf("spans %v", spans)
	}
}

// TestTracingBodyAndReload: tracing turned on by a reload applies to the
// next request; one with a body has body_read.
func TestTracingBodyAndReload(t *testing.T) {
	rc, be := &otlpReceiver{}, &traceBackend{}
	col, backend := httptest.NewServer(rc), httptest.NewServer(be)
	defer col.Close()
	defer backend.Close()
	cfg := fmt.Sprintf("apps:\n  photos:\n    hosts: [photos.test]\n    backends: [%s]\n", strings.TrimPrefix(backend.URL, "http://"))
	p := startProxy(t, cfg)
	tracedGet(t, p, "Traceparent", clientTP)
	if err := p.srv.Reload(mustParse(t, cfg+"tracing: {endpoint: "+col.URL+"/otel, service_name: edge}\n")); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, p.URL+"/up", strings.NewReader("a body"))
	req.Host = "photos.test"
	req.Header.Set("Traceparent", clientTP)
	tracedDo(t, req)
	p.Stop()
	spans := rc.got(t)
	if len(spans) != 1 || strings.Join(eventNames(spans[0]), ",") != "shape,rate,body_read,admitted,forward" || spans[0].Name != "POST photos" {
		t.Fatalf("spans %v", spans)
	}
	be.mu.Lock()
	defer be.mu.Unlock()
	if be.parents[0][0] != clientTP || be.parents[1][0] == clientTP {
		t.Fatalf("traceparents %q: off passes the client's, on levee's", be.parents)
	}
}

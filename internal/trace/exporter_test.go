package trace

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/leveeproxy/levee/internal/leaktest"
)

// receiver is an OTLP/HTTP endpoint that decodes what it is sent with the
// generated OTLP types; status answers each request (200 when nil).
type receiver struct {
	mu     sync.Mutex
	reqs   []*coltrace.ExportTraceServiceRequest
	header http.Header
	status func(n int) int
	calls  atomic.Int32
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := int(rc.calls.Add(1))
	if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	if rc.status != nil {
		if c := rc.status(n); c != http.StatusOK {
			w.WriteHeader(c)
			return
		}
	}
	body, _ := io.ReadAll(r.Body)
	var req coltrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	rc.mu.Lock()
	rc.reqs, rc.header = append(rc.reqs, &req), r.Header.Clone()
	rc.mu.Unlock()
}

func (rc *receiver) spans() []*tracepb.Span {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var out []*tracepb.Span
	for _, r := range rc.reqs {
		for _, rs := range r.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				out = append(out, ss.Spans...)
			}
		}
	}
	return out
}

func runExporter(t *testing.T, rc *receiver, o ExporterOptions) (*Exporter, func()) {
	t.Helper()
	srv := httptest.NewServer(rc)
	t.Cleanup(srv.Close)
	x := NewExporter(o)
	x.SetConfig(ExportConfig{URL: TracesURL(srv.URL + "/"), Timeout: time.Second, ServiceName: "edge",
		Headers: map[string]string{"X-Api-Key": "k"}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); x.Run(ctx) }()
	return x, func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("exporter did not stop")
		}
	}
}

func testSpan(i int) *Span {
	sp := NewSpan()
	sp.TraceID, sp.SpanID, sp.Parent = IDs{}.TraceID(), IDs{}.SpanID(), IDs{}.SpanID()
	sp.Flags, sp.Remote, sp.Error = FlagSampled, true, i%2 == 1
	sp.Start, sp.End = 1_000, 2_000
	sp.SetName("GET", "photos")
	sp.SetTraceState("rojo=1")
	sp.Str("url.path", "/a")
	sp.Int("http.response.status_code", 200+int64(i))
	sp.Event("shape", 1_100)
	return sp
}

func TestExporterSendsRealOTLP(t *testing.T) {
	rc := &receiver{}
	x, stop := runExporter(t, rc, ExporterOptions{Flush: 10 * time.Millisecond})
	want := testSpan(1)
	tid, sid, pid := want.TraceID, want.SpanID, want.Parent
	x.Enqueue(want)
	x.Enqueue(testSpan(2))
	stop() // the shutdown flush sends what is left
	spans := rc.spans()
	if len(spans) != 2 {
		t.Fatalf("%d spans", len(spans))
	}
	sp := spans[0]
	if string(sp.TraceId) != string(tid[:]) || string(sp.SpanId) != string(sid[:]) || string(sp.ParentSpanId) != string(pid[:]) ||
		sp.Name != "GET photos" || sp.Kind != tracepb.Span_SPAN_KIND_SERVER || sp.TraceState != "rojo=1" ||
		sp.StartTimeUnixNano != 1000 || sp.EndTimeUnixNano != 2000 || sp.Flags != 0x301 ||
		sp.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR {
		t.Fatalf("span %v", sp)
	}
	if len(sp.Attributes) != 2 || sp.Attributes[0].Key != "url.path" || sp.Attributes[0].Value.GetStringValue() != "/a" ||
		sp.Attributes[1].Value.GetIntValue() != 201 {
		t.Fatalf("attributes %v", sp.Attributes)
	}
	if len(sp.Events) != 1 || sp.Events[0].Name != "shape" || sp.Events[0].TimeUnixNano != 1100 {
		t.Fatalf("events %v", sp.Events)
	}
	if spans[1].Status != nil {
		t.Fatalf("a span without error has no status: %v", spans[1].Status)
	}
	rs := rc.reqs[0].ResourceSpans[0]
	if kv := rs.Resource.Attributes[0]; kv.Key != "service.name" || kv.Value.GetStringValue() != "edge" {
		t.Fatalf("resource %v", rs.Resource)
	}
	if rs.ScopeSpans[0].Scope.Name != scopeName || rs.ScopeSpans[0].SchemaUrl != schemaURL || rc.header.Get("X-Api-Key") != "k" {
		t.Fatalf("scope %v, header %v", rs.ScopeSpans[0].Scope, rc.header)
	}
	if st := x.Stats(); st.Exported != 2 || st.Dropped != 0 || st.Failed != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestExporterRetriesBounded(t *testing.T) {
	rc := &receiver{status: func(n int) int {
		if n == 1 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	}}
	var slept []time.Duration
	sleep := func(_ context.Context, d time.Duration) error { slept = append(slept, d); return nil }
	x, stop := runExporter(t, rc, ExporterOptions{Flush: 10 * time.Millisecond, Sleep: sleep})
	x.Enqueue(testSpan(0))
	waitFor(t, func() bool { return x.Stats().Exported == 1 })
	stop()
	if len(slept) != 1 || slept[0] != firstBackoff {
		t.Fatalf("backoff %v", slept)
	}

	rc = &receiver{status: func(int) int { return http.StatusServiceUnavailable }}
	slept = nil
	x, stop = runExporter(t, rc, ExporterOptions{Flush: 10 * time.Millisecond, Sleep: sleep})
	x.Enqueue(testSpan(0))
	waitFor(t, func() bool { return x.Stats().Failed == 1 })
	stop()
	if got := rc.calls.Load(); got != MaxAttempts || len(slept) != MaxAttempts-1 {
		t.Fatalf("%d attempts, slept %v", got, slept)
	}

	rc = &receiver{status: func(int) int { return http.StatusBadRequest }} // not retryable
	x, stop = runExporter(t, rc, ExporterOptions{Flush: 10 * time.Millisecond, Sleep: sleep})
	x.Enqueue(testSpan(0))
	waitFor(t, func() bool { return x.Stats().Failed == 1 })
	stop()
	if got := rc.calls.Load(); got != 1 {
		t.Fatalf("%d attempts at a 400", got)
	}
}

func TestExporterDropsWhenFull(t *testing.T) {
	x := NewExporter(ExporterOptions{}) // not running: nothing takes from the queue
	for i := range QueueSize + 10 {
		x.Enqueue(testSpan(i))
	}
	if st := x.Stats(); st.Dropped != 10 {
		t.Fatalf("stats %+v", st)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	leaktest.WaitFor(t, 5*time.Second, "the condition", cond)
}

package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/leveeproxy/levee/internal/topk"
)

// series returns the values of every series of the metric name, by client label.
func (p *proxy) series(name string) map[string]float64 {
	p.t.Helper()
	mfs, err := p.srv.metrics.Registry.Gather()
	if err != nil {
		p.t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "client" {
					out[lp.GetValue()] = m.GetGauge().GetValue()
				}
			}
		}
	}
	return out
}

func TestTopClientIsTheHeavyOne(t *testing.T) {
	p, _, _ := rateProxy(t, "{client: {key: header:X-Api-Key, top_k: 4}}")
	for range 100 {
		p.getAs("heavy")
	}
	for _, c := range []string{"light-1", "light-2", "light-3"} {
		for range 10 {
			p.getAs(c)
		}
	}
	got := p.series("levee_top_client_requests")
	want := map[string]float64{"heavy": 100, "light-1": 10, "light-2": 10, "light-3": 10}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("levee_top_client_requests = %v; want %v", got, want)
	}
	if r := p.series("levee_top_client_rejected"); len(r) != 0 {
		t.Fatalf("levee_top_client_rejected = %v; want none", r)
	}

	// The admin API serves AppStats as JSON: the same list, heaviest first.
	stats, _ := p.srv.Table().AppStats("a")
	body, err := json.Marshal(stats)
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		TopClients topk.Clients `json:"top_clients"`
	}
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	if len(st.TopClients.Requests) != 4 || st.TopClients.Requests[0] != (topk.Entry{Key: "heavy", Count: 100}) {
		t.Fatalf("top_clients.requests = %+v; want heavy=100 first of 4", st.TopClients.Requests)
	}
}

func TestTopClientSeriesStayBounded(t *testing.T) {
	p, _, _ := rateProxy(t, "{client: {key: header:X-Api-Key, top_k: 4}}")
	for i := range 50 {
		p.getAs(fmt.Sprintf("client-%d", i))
	}
	for range 5 {
		p.getAs("client-7")
	}
	got := p.series("levee_top_client_requests")
	if len(got) > 4 {
		t.Fatalf("%d series: %v; want at most top_k = 4", len(got), got)
	}
	// Space-Saving: count ≥ true (6), and over by at most N/K = 55/4.
	if c := got["client-7"]; c < 6 || c > 6+55/4 {
		t.Fatalf("client-7 = %v (series %v); want 6..%d", c, got, 6+55/4)
	}
}

func TestTopClientRejectedShowsTheAbuser(t *testing.T) {
	p, _, _ := rateProxy(t, "{client: {key: header:X-Api-Key, rate: 10/s, burst: 5, top_k: 4}}")
	refused := 0
	for range 50 {
		if p.getAs("abuser").StatusCode == http.StatusTooManyRequests {
			refused++
		}
	}
	for range 3 {
		if r := p.getAs("polite"); r.StatusCode != http.StatusOK {
			t.Fatalf("polite client: %d; want 200", r.StatusCode)
		}
	}
	if refused != 45 {
		t.Fatalf("abuser refused %d times; want 45 (burst 5 on a frozen clock)", refused)
	}
	if got := p.series("levee_top_client_rejected"); fmt.Sprint(got) != fmt.Sprint(map[string]float64{"abuser": 45}) {
		t.Fatalf("levee_top_client_rejected = %v; want abuser=45 only", got)
	}
	if got := p.series("levee_top_client_requests"); got["abuser"] != 50 || got["polite"] != 3 {
		t.Fatalf("levee_top_client_requests = %v; want abuser=50 polite=3", got)
	}
}

func TestTopClientFallsBackToThePeerAndCanBeOff(t *testing.T) {
	p, _, _ := rateProxy(t, "{client: {key: header:X-Api-Key}}") // top_k defaults to 16
	p.getAs("")
	p.getAs("")
	if got := p.series("levee_top_client_requests"); got["127.0.0.1"] != 2 {
		t.Fatalf("levee_top_client_requests = %v; want the peer 127.0.0.1=2", got)
	}
	off, _, _ := rateProxy(t, "{client: {top_k: 0}}")
	off.getAs("x")
	if got := off.series("levee_top_client_requests"); len(got) != 0 {
		t.Fatalf("top_k 0: %v; want no series", got)
	}
	if st, _ := off.srv.Table().AppStats("a"); st.TopClients != nil {
		t.Fatalf("top_k 0: top_clients %+v; want none", st.TopClients)
	}
}

func TestQueueWaitIsObservedForRequestsThatWaited(t *testing.T) {
	be := newGatedBackend(t)
	p := startProxy(t, fmt.Sprintf(`
apps:
  a:
    hosts: [a.test]
    backends: [%s]
    limits: {concurrency: 1, queue: {max_wait: 30s, max_len: 10, target: 1m}}
`, be.addr()))
	results := make(chan *http.Response, 3)
	a := p.app("a")
	p.asyncGet("a.test", "/", results)
	waitFor(t, "one request at the backend", func() bool { return be.inflight.Load() == 1 })
	p.asyncGet("a.test", "/", results)
	p.asyncGet("a.test", "/", results)
	waitFor(t, "two requests queued", func() bool { return a.Limiter.Queued() == 2 })
	be.open()
	for range 3 {
		if r := <-results; r.StatusCode != http.StatusOK {
			t.Fatalf("status %d; want 200", r.StatusCode)
		}
	}
	if n := p.metric("levee_queue_wait_seconds", map[string]string{"app": "a"}); n != 2 {
		t.Fatalf("levee_queue_wait_seconds has %v samples; want 2 (the request admitted at once is not observed)", n)
	}
}

// BenchmarkTopClientsOnReject is the cost of the top clients on the
// cheapest request path, a rejection, with top_k off and on.
func BenchmarkTopClientsOnReject(b *testing.B) {
	for _, topK := range []int{0, 16} {
		p := benchServer(b, fmt.Sprintf("limits: {concurrency: 1, queue: {max_len: 0, max_wait: 0s}, client: {top_k: %d}}", topK))
		if err := p.view("a").Limiter.Acquire(b.Context()); err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("nethttp/top_k=%d", topK), func(b *testing.B) {
			req := originRequest("a.test")
			w := discardWriter{h: http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				clear(w.h)
				p.ServeHTTP(&w, req)
			}
		})
		b.Run(fmt.Sprintf("fasthttp/top_k=%d", topK), func(b *testing.B) {
			var ctx fasthttp.RequestCtx
			ctx.Init(&fasthttp.Request{}, nil, nil)
			b.ReportAllocs()
			for b.Loop() {
				fastRequest(&ctx, "a.test")
				p.serveFast(&ctx)
			}
		})
		p.view("a").Limiter.Release()
	}
}

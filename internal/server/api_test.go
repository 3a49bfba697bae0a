package server

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/topk"
)

// postAs sends POST / for a.test as client apiKey with body.
func (p *proxy) postAs(apiKey, body string) *http.Response {
	p.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, p.URL+"/", strings.NewReader(body))
	req.Host = "a.test"
	req.Header.Set("X-Api-Key", apiKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		p.t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// TestAPIShowsWhoIsUsingWhat: the live API names the heaviest client in
// each dimension, on both protocols: "chatty" by requests and refusals,
// "quiet" (the outage's client: few requests, huge batches) by items and
// bytes; and the app's live rates count them.
func TestAPIShowsWhoIsUsingWhat(t *testing.T) {
	p, clk, _ := rateProxy(t, `{client: {key: header:X-Api-Key, top_k: 8, rate: 50/s, burst: 50}, batch: {json_field: items, max: 100000}}`)
	for range 80 { // 50 pass, 30 refused client-rate
		p.getAs("chatty")
	}
	for _, c := range []string{"light-1", "light-2"} {
		for range 5 {
			p.getAs(c)
		}
	}
	batch := `{"items":[` + strings.Repeat(`1,`, 19_999) + `1]}`
	for range 3 {
		if r := p.postAs("quiet", batch); r.StatusCode != http.StatusOK {
			t.Fatalf("batch: %d", r.StatusCode)
		}
	}
	clk.Advance(time.Second) // the live rates count whole seconds

	first := func(by, window string) topk.Share {
		t.Helper()
		r, ok, err := p.srv.Table().Top("a", by, window)
		if !ok || err != nil || len(r.Clients) == 0 {
			t.Fatalf("top by %s over %s: %+v, %v, %v", by, window, r, ok, err)
		}
		return r.Clients[0]
	}
	for _, w := range topk.WindowNames {
		if c := first("requests", w); c.Client != "chatty" || c.Count != 80 {
			t.Fatalf("%s by requests: %+v; want chatty with 80", w, c)
		}
		if c := first("rejected", w); c.Client != "chatty" || c.Count != 30 {
			t.Fatalf("%s by rejected: %+v; want chatty with 30", w, c)
		}
		if c := first("items", w); c.Client != "quiet" || c.Count != 60_000 || c.Share != 1 {
			t.Fatalf("%s by items: %+v; want quiet with 60000, all of them", w, c)
		}
		if c := first("bytes", w); c.Client != "quiet" || c.Count < 3*uint64(len(batch)) {
			t.Fatalf("%s by bytes: %+v; want quiet with at least %d", w, c, 3*len(batch))
		}
	}
	if _, _, err := p.srv.Table().Top("a", "cpu", "1m"); err == nil || !strings.Contains(err.Error(), "by must be one of") {
		t.Fatalf("by=cpu: %v; want an error naming by", err)
	}
	if _, _, err := p.srv.Table().Top("a", "requests", "1h"); err == nil || !strings.Contains(err.Error(), "window must be one of") {
		t.Fatalf("window=1h: %v; want an error naming window", err)
	}
	if _, ok, _ := p.srv.Table().Top("nope", "requests", "1m"); ok {
		t.Fatal("an unknown app has a top")
	}

	apps, total := p.srv.Table().Apps(0)
	if total != 1 || len(apps) != 1 || apps[0].Name != "a" || apps[0].Hosts[0] != "a.test" {
		t.Fatalf("apps: %+v (%d)", apps, total)
	}
	a := apps[0]
	if a.Requests != 9.3 || a.Rejected["client-rate"] != 3 || a.BackendsTotal != 1 || a.BackendsHealthy != 1 {
		t.Fatalf("app a: %+v; want 9.3 requests/s (93 over 10 s), 3 client-rate refusals/s, 1 of 1 backends healthy", a)
	}
	d, ok := p.srv.Table().App("a")
	if !ok || d.Configured.ClientRate != 50 || d.InForce.ClientRate != 50 || len(d.Why) != 0 || d.TopK != 8 {
		t.Fatalf("detail: %+v", d)
	}
	if len(d.TopClients) == 0 || d.TopClients[0].Client != "chatty" {
		t.Fatalf("detail's top clients: %+v; want chatty first", d.TopClients)
	}
	if _, ok := p.srv.Table().App("nope"); ok {
		t.Fatal("an unknown app has a detail")
	}
	// Ten seconds on, the live rates are back to nothing; the 10m window
	// still has the heavy client.
	clk.Advance(10 * time.Second)
	if apps, _ := p.srv.Table().Apps(0); apps[0].Requests != 0 || len(apps[0].Rejected) != 0 {
		t.Fatalf("10 s later: %+v; want no traffic", apps[0])
	}
	if c := first("requests", "10m"); c.Client != "chatty" {
		t.Fatalf("10m later: %+v", c)
	}
}

// TestAPIExplainsScaledLimits: an unexpected instance's limits in force
// are its strict fraction of the configured ones, and the detail says why.
func TestAPIExplainsScaledLimits(t *testing.T) {
	p, _, _ := rateProxy(t, `{concurrency: 40, rate: 100/s}`)
	p.srv.SetUnexpected(true)
	d, ok := p.srv.Table().App("a")
	if !ok {
		t.Fatal("no app a")
	}
	if d.Configured.Concurrency != 40 || d.InForce.Concurrency != 4 || d.InForce.Rate != 10 {
		t.Fatalf("configured %+v, in force %+v; want 40 → 4 and rate 100 → 10", d.Configured, d.InForce)
	}
	if len(d.Why) != 1 || !strings.Contains(d.Why[0], "unexpected") {
		t.Fatalf("why: %q", d.Why)
	}
	in := p.srv.Instance()
	if in.Role != "unexpected" || in.StrictFactor != 0.1 || in.Apps != 1 {
		t.Fatalf("instance: %+v", in)
	}
}

// BenchmarkAPIApps10k is GET /api/apps's work at 10,000 apps: ranked,
// the busiest summarised and encoded: the default 100, and all of them.
func BenchmarkAPIApps10k(b *testing.B) {
	var cfg strings.Builder
	cfg.WriteString("apps:\n")
	for i := range 10_000 {
		fmt.Fprintf(&cfg, "  app%d: {hosts: [h%d.test], backends: ['127.0.0.1:9']}\n", i, i)
	}
	p := startProxy(b, cfg.String())
	for _, limit := range []int{100, 0} {
		b.Run(fmt.Sprintf("limit=%d", limit), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				apps, _ := p.srv.Table().Apps(limit)
				if err := json.NewEncoder(io.Discard).Encode(apps); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

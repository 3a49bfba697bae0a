package drill

import (
	"bytes"
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// gate is a toy edge with a concurrency limit of slots in front of the
// drill's backend (set by the drill through OnBackends); a request waits at
// most gateWait for a slot, then gets 503. Streaming, it holds the slot while
// the body comes in and the response goes out, as levee did in the incident;
// buffered, it reads the whole body before it takes a slot and the whole
// response before it gives the slot back.
type gate struct {
	to       atomic.Pointer[url.URL]
	slots    chan struct{}
	buffered bool
	rp       *httputil.ReverseProxy
}

func startGate(t *testing.T, slots int, buffered bool) (*gate, string) {
	g := &gate{slots: make(chan struct{}, slots), buffered: buffered}
	g.rp = &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(g.to.Load()); pr.Out.Host = pr.In.Host },
		ErrorLog: log.New(io.Discard, "", 0)}
	s := httptest.NewServer(g)
	t.Cleanup(s.Close)
	return g, s.URL
}

func (g *gate) onBackends(_ string, bs []*Backend) error {
	g.to.Store(&url.URL{Scheme: "http", Host: bs[0].Addr})
	return nil
}

// gateWait is long beside a slot's hold by a buffered gate (a few ms), so
// that a busy CI machine cannot make the good edge refuse its victim, and
// short beside the attack, so that the streaming gate's held slots do.
const gateWait = time.Second

func (g *gate) acquire() bool {
	t := time.NewTimer(gateWait)
	defer t.Stop()
	select {
	case g.slots <- struct{}{}:
		return true
	case <-t.C:
		return false
	}
}

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body []byte
	if g.buffered {
		var err error
		if body, err = io.ReadAll(io.LimitReader(r.Body, 4<<20)); err != nil {
			return
		}
	}
	if !g.acquire() {
		w.Header().Set("Retry-After", "1")
		http.Error(w, "queue-timeout", http.StatusServiceUnavailable)
		return
	}
	if !g.buffered {
		defer func() { <-g.slots }()
		g.rp.ServeHTTP(w, r)
		return
	}
	req, _ := http.NewRequestWithContext(r.Context(), r.Method, g.to.Load().String()+r.URL.RequestURI(), bytes.NewReader(body))
	req.Host = r.Host
	resp, err := http.DefaultTransport.RoundTrip(req)
	var data []byte
	if err == nil {
		data, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	<-g.slots
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(data)
}

// slowBrief is a short slow-clients drill: 20 connections of each kind,
// trickling every 50 ms, against an edge of 8 slots.
func slowBrief(target string) Options {
	o := brief(Options{Target: target, SlowHost: "slow.test", SlowConns: 20, SlowInterval: 50 * time.Millisecond,
		SlowReadSize: 256 << 10, VictimRate: 50, RouteWait: waitTimeout})
	return o
}

func TestSlowClientsDrill(t *testing.T) {
	g, url := startGate(t, 8, true)
	o := slowBrief(url)
	var printed strings.Builder
	o.Log, o.OnBackends = &printed, g.onBackends
	r := slowClients.Run(context.Background(), o)
	requireVerdict(t, r, Pass)
	if !strings.Contains(printed.String(), "apps:\n  slow:\n    hosts: [slow.test]") {
		t.Fatalf("no levee snippet printed:\n%s", printed.String())
	}
	if len(r.Notes) != 3 || !strings.Contains(r.Notes[1], "slow-body, 20 connections") || !strings.Contains(r.Notes[1], "20 opened") {
		t.Fatalf("notes do not say what each kind of attack did: %q", r.Notes)
	}
	if r.Ratios["victim success"] != 1 {
		t.Fatalf("ratios %v", r.Ratios)
	}

	// the same limit, held while bodies and responses stream: 40 slow
	// connections take the 8 slots and the victim is refused
	g, url = startGate(t, 8, false)
	o = slowBrief(url)
	o.OnBackends = g.onBackends
	r = slowClients.Run(context.Background(), o)
	requireVerdict(t, r, Fail)
	if c := checkNamed(t, r, "victim's success under attack"); c.Pass || !strings.Contains(c.Got, "%") {
		t.Fatalf("a streaming edge whose slots slow clients hold passed: %+v", c)
	}

	// one kind at a time: slowloris alone never reaches the handler's slots
	o.SlowKinds = []string{"slowloris"}
	requireVerdict(t, slowClients.Run(context.Background(), o), Pass)
	o.SlowKinds = []string{"slow-read", "nonsense"}
	if r := slowClients.Run(context.Background(), o); r.Verdict != Skipped || !strings.Contains(r.Reason, `"nonsense"`) {
		t.Fatalf("an unknown kind: %s %q", r.Verdict, r.Reason)
	}
}

func TestGradeSlow(t *testing.T) {
	o := Options{}.Defaults()
	base := result(100, 0, 0)
	for range 100 {
		base.OKLat.Record(time.Millisecond)
	}
	for _, c := range []struct {
		ok, refused int64
		lat         time.Duration
		want        string // P/F: success, latency
	}{
		{1000, 0, time.Millisecond, "PP"},
		{999, 1, time.Millisecond, "PP"}, // exactly 99.9%
		{998, 2, time.Millisecond, "FP"},
		{1000, 0, 150 * time.Millisecond, "PF"}, // over 1 ms + 100 ms
		{251, 299, time.Millisecond, "FP"},      // the incident: 297-299 of 550 refused
	} {
		under := result(c.ok, c.refused, c.refused)
		for range c.ok {
			under.OKLat.Record(c.lat)
		}
		if got := verdicts(gradeSlow(base, under, o)); got != c.want {
			t.Errorf("%d ok, %d refused, %v: %s; want %s", c.ok, c.refused, c.lat, got, c.want)
		}
	}
}

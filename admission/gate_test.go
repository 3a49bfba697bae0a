package admission_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/leveeproxy/levee/admission"
	"github.com/leveeproxy/levee/internal/config"
)

// mustGate is the gate of limits written in YAML.
func mustGate(t testing.TB, yaml string) *admission.Gate {
	t.Helper()
	l, err := admission.ParseLimits([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	g, err := admission.NewGate(l)
	if err != nil {
		t.Fatalf("NewGate of parsed limits: %v", err)
	}
	return g
}

func TestParseLimitsRefusesWhatItCannotApply(t *testing.T) {
	for yaml, want := range map[string]string{
		"bandwidth: 10MB/s":     "limits.bandwidth: not applied",
		"rate: lots":            "limits.rate",
		"concurrency: -1":       "limits.concurrency",
		"client: {key: cookie}": "limits.client.key",
		"no_such_limit: 1":      "no_such_limit",
	} {
		if _, err := admission.ParseLimits([]byte(yaml)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseLimits(%q) = %v; want an error naming %s", yaml, err, want)
		}
	}
	if _, err := admission.ParseLimits(nil); err != nil {
		t.Errorf("empty limits (levee's defaults): %v", err)
	}
}

func TestZeroGatePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("(*Gate)(nil).Wrap did not panic")
		}
	}()
	(*admission.Gate)(nil).Wrap(http.NotFoundHandler())
}

// NewGate checks typed limits by levee's rules, naming the field as the
// config writes it; a negative "none" is a valid setting, not an error.
func TestNewGateChecksLimits(t *testing.T) {
	for want, l := range map[string]admission.Limits{
		"limits.concurrency":        {Concurrency: -1},
		"limits.client.key":         {Client: admission.Client{Key: "cookie:sid"}},
		"limits.shadow":             {Shadow: []admission.Reason{admission.QueueFull}},
		"limits.concurrency.max":    {Adaptive: &admission.Adaptive{Min: 10, Max: 5}},
		"limits.priority.paths./a":  {Priority: admission.Priority{Paths: map[string]admission.Class{"/a": "urgent"}}},
		"limits.per_path./a.header": {PerPath: map[string]admission.PathLimits{"/a": {HeaderCount: -5}}},
	} {
		if _, err := admission.NewGate(l); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("NewGate(%+v) = %v; want an error naming %s", l, err, want)
		}
	}
	for _, l := range []admission.Limits{{}, {Queue: admission.Queue{MaxLen: -1, MaxWait: -1}, Body: -1},
		{Client: admission.Client{TopK: -1}}} {
		if _, err := admission.NewGate(l); err != nil {
			t.Errorf("NewGate(%+v): %v", l, err)
		}
	}
}

// The typed Limits carry every setting of the YAML section: what
// ParseLimits reads converts back to exactly the config it was read as.
func TestLimitsCarryEveryYAMLSetting(t *testing.T) {
	for _, yaml := range []string{"", "{concurrency: 7}",
		"{concurrency: {adaptive: gradient, min: 2, max: 50}, queue: {max_len: 0, max_wait: 0s, target: 7ms, interval: 70ms}}",
		"{rate: 10/m, burst: 3, client: {key: 'header:X-Key', rate: 2/s, burst: 4, max_keys: 99, top_k: 0}, fair_share: true}",
		"{priority: {default: sheddable, paths: {/admin: critical}, clients: {vip: critical}}}",
		"{body: 0, header_bytes: 1KB, header_count: 10, url_length: 100, query_values: 3, batch: {json_field: items, max: 9}}",
		"{per_path: {/up: {body: 5MB}, /none: {body: 0}, /b: {batch: {json_field: ids, max: 2}, header_count: 4}}, shadow: [rate, body]}",
	} {
		want, err := config.ParseLimits([]byte(yaml))
		if err != nil {
			t.Fatal(err)
		}
		l, err := admission.ParseLimits([]byte(yaml))
		if err != nil {
			t.Fatal(err)
		}
		got, err := admission.LimitsConfig(l)
		if err != nil {
			t.Fatalf("%s: %v", yaml, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %+v\nwant %+v", yaml, got, want)
		}
	}
	zero, err := admission.LimitsConfig(admission.Limits{})
	if def, _ := config.ParseLimits(nil); err != nil || !reflect.DeepEqual(zero, def) {
		t.Errorf("Limits{} are %+v, %v; want levee's defaults %+v", zero, err, def)
	}
}

// echoBody answers what it read, or, when the read fails, its own 400
// (which the gate replaces with levee's refusal).
func echoBody(readErr *error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if readErr != nil {
			*readErr = err
		}
		if err != nil {
			http.Error(w, "handler: "+err.Error(), http.StatusBadRequest)
			return
		}
		w.Write(b)
	})
}

func post(t *testing.T, url, body string, chunked bool) *http.Response {
	t.Helper()
	var rd io.Reader = strings.NewReader(body)
	if chunked {
		rd = io.MultiReader(rd)
	}
	resp, err := http.Post(url, "application/json", rd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// A body over a limit fails the handler's read with a *Rejection of the
// limit's reason, and the client gets levee's refusal, not the handler's
// answer to the failed read.
func TestBodyRefusalReplacesTheHandlersAnswer(t *testing.T) {
	var readErr error
	g := mustGate(t, "{body: 100B, batch: {json_field: items, max: 2}}")
	srv := httptest.NewServer(g.Wrap(echoBody(&readErr)))
	defer srv.Close()
	for _, c := range []struct {
		body    string
		chunked bool
		status  int
		reason  admission.Reason
	}{
		{`{"items": [1, 2]}`, true, 200, ""},
		{`{"items": [1, 2, 3]}`, false, 422, admission.BatchItems},
		{`{"items": [1, 2, 3]}`, true, 422, admission.BatchItems},
		{`{"items": [` + strings.Repeat(" ", 120) + `]}`, true, 413, "body"},
		{`{"items": [` + strings.Repeat(" ", 120) + `]}`, false, 413, "body"}, // refused before the handler
	} {
		readErr = nil
		resp := post(t, srv.URL, c.body, c.chunked)
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != c.status || admission.Reason(resp.Header.Get("Levee-Reject")) != c.reason {
			t.Errorf("%q chunked %v: %d %q %q; want %d %q", c.body, c.chunked, resp.StatusCode,
				resp.Header.Get("Levee-Reject"), b, c.status, c.reason)
		}
		if strings.Contains(string(b), "handler:") {
			t.Errorf("%q: the handler's own answer got out: %q", c.body, b)
		}
		var rej *admission.Rejection
		if c.status == 200 || (c.reason == "body" && !c.chunked) {
			continue // no read failed (or none ran)
		}
		if !errors.As(readErr, &rej) || rej.Reason != c.reason {
			t.Errorf("%q chunked %v: the handler's read failed with %v; want a *Rejection (%s)", c.body, c.chunked, readErr, c.reason)
		}
	}
	st := g.Stats()
	if st.Rejected[admission.BatchItems] != 2 || st.Rejected["body"] != 2 {
		t.Errorf("stats %+v; want 2 batch-items and 2 body refusals", st.Rejected)
	}
}

// A shadowed body limit lets a chunked body over it through to the
// handler, counted once.
func TestShadowedBodyIsCountedWhileRead(t *testing.T) {
	g := mustGate(t, "{body: 10B, shadow: [body]}")
	srv := httptest.NewServer(g.Wrap(echoBody(nil)))
	defer srv.Close()
	for _, chunked := range []bool{true, false} {
		resp := post(t, srv.URL, strings.Repeat("x", 50), chunked)
		if b, _ := io.ReadAll(resp.Body); resp.StatusCode != 200 || len(b) != 50 {
			t.Fatalf("chunked %v: %d, %d bytes; want 200 and the whole body", chunked, resp.StatusCode, len(b))
		}
	}
	if st := g.Stats(); st.Shadowed[admission.Body] != 2 || len(st.Rejected) != 0 {
		t.Fatalf("stats %+v; want 2 shadowed body refusals and no refusal", st)
	}
}

// A handler that answers before it reads the body keeps its answer: the
// gate can only refuse what has not been sent.
func TestBodyRefusalAfterTheAnswerLeavesIt(t *testing.T) {
	g := mustGate(t, "{body: 10B}")
	srv := httptest.NewServer(g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusAccepted)
		_, err := io.ReadAll(r.Body)
		var rej *admission.Rejection
		if !errors.As(err, &rej) {
			t.Errorf("read = %v; want a *Rejection", err)
		}
	})))
	defer srv.Close()
	if resp := post(t, srv.URL, strings.Repeat("x", 50), true); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("%d; want the handler's 202", resp.StatusCode)
	}
}

func TestTopNamesTheHeavyClient(t *testing.T) {
	g := mustGate(t, "{client: {key: 'header:X-Api-Key', top_k: 4, rate: 1000/s}}")
	srv := httptest.NewServer(g.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	defer srv.Close()
	for i := range 30 {
		key := "light"
		if i%3 != 0 {
			key = "heavy"
		}
		req, _ := http.NewRequest("GET", srv.URL, nil)
		req.Header.Set("X-Api-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	rep, err := g.Top(admission.ByRequests, admission.Last10s)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Clients) != 2 || rep.Clients[0].Client != "heavy" || rep.Clients[0].Count != 20 || rep.Clients[1].Count != 10 {
		t.Fatalf("top %+v; want heavy 20, light 10", rep)
	}
	if rep.By != admission.ByRequests || rep.Window != admission.Last10s {
		t.Errorf("report of %v over %v; want requests over 10s", rep.By, rep.Window)
	}
	if _, err := g.Top(admission.By(9), admission.Last10s); err == nil {
		t.Error("Top by an unknown measure: no error")
	}
	if _, err := g.Top(admission.ByRequests, admission.Window(-1)); err == nil {
		t.Error("Top over an unknown window: no error")
	}
	top := httptest.NewServer(g.TopHandler())
	defer top.Close()
	resp, err := http.Get(top.URL + "?by=requests&window=1m")
	if err != nil {
		t.Fatal(err)
	}
	var got admission.TopReport
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || resp.StatusCode != 200 || got.Clients[0].Client != "heavy" || got.Window != admission.Last1m {
		t.Fatalf("TopHandler: %d %+v %v", resp.StatusCode, got, err)
	}
	resp.Body.Close()
	if resp, _ = http.Get(top.URL + "?by=nope"); resp.StatusCode != 400 {
		t.Errorf("TopHandler with a bad measure: %d; want 400", resp.StatusCode)
	}
	resp.Body.Close()

	off := mustGate(t, "{client: {top_k: 0}}")
	if _, err := off.Top(admission.ByRequests, admission.Last10s); !errors.Is(err, admission.ErrTopOff) {
		t.Errorf("Top with top_k 0: %v; want ErrTopOff", err)
	}
}

// By and Window read and write levee's admin API's words.
func TestByAndWindowNames(t *testing.T) {
	for v, want := range map[fmt.Stringer]string{admission.ByRequests: "requests", admission.ByRejected: "rejected",
		admission.ByBytes: "bytes", admission.ByItems: "items",
		admission.Last10s: "10s", admission.Last1m: "1m", admission.Last10m: "10m"} {
		if v.String() != want {
			t.Errorf("%#v names itself %q; want %q", v, v.String(), want)
		}
	}
	var w admission.Window
	if err := w.UnmarshalText([]byte("10m")); err != nil || w != admission.Last10m {
		t.Errorf("UnmarshalText(10m) = %v, %v", w, err)
	}
	var b admission.By
	if err := b.UnmarshalText([]byte("weight")); err == nil {
		t.Error("UnmarshalText(weight): no error")
	}
}

// discard is a ResponseWriter that keeps nothing, for allocation counts.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) WriteHeader(int)             {}
func (d *discard) Write(p []byte) (int, error) { return len(p), nil }

// WriteString, as net/http's own writers have it.
func (d *discard) WriteString(s string) (int, error) { return len(s), nil }

func BenchmarkGateRefusal(b *testing.B) {
	h := mustGate(b, "{rate: 1/m, burst: 1}").Wrap(http.NotFoundHandler())
	w, r := &discard{h: http.Header{}}, httptest.NewRequest("GET", "/", nil)
	h.ServeHTTP(w, r)
	b.ReportAllocs()
	for b.Loop() {
		clear(w.h)
		h.ServeHTTP(w, r)
	}
}

func BenchmarkGateAdmitted(b *testing.B) {
	h := mustGate(b, "{concurrency: 64, rate: 1000000/s}").Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	w, r := &discard{h: http.Header{}}, httptest.NewRequest("GET", "/", nil)
	b.ReportAllocs()
	for b.Loop() {
		h.ServeHTTP(w, r)
	}
}

func BenchmarkGateShapeRefusal(b *testing.B) {
	h := mustGate(b, "{url_length: 64}").Wrap(http.NotFoundHandler())
	w, r := &discard{h: http.Header{}}, httptest.NewRequest("GET", "/"+strings.Repeat("a", 100), nil)
	b.ReportAllocs()
	for b.Loop() {
		clear(w.h)
		h.ServeHTTP(w, r)
	}
}

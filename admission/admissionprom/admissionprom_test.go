package admissionprom_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leveeproxy/levee/admission"
	"github.com/leveeproxy/levee/admission/admissionprom"
)

// The collector reports the gate under levee's own metric names.
func TestCollectorSpeaksLeveesMetricNames(t *testing.T) {
	l, err := admission.ParseLimits([]byte("{concurrency: 7, rate: 1/m, burst: 2, url_length: 64, shadow: [url-length]}"))
	if err != nil {
		t.Fatal(err)
	}
	g, err := admission.NewGate(l)
	if err != nil {
		t.Fatal(err)
	}
	h := g.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for range 5 {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	}
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/"+strings.Repeat("a", 100), nil))
	reg := prometheus.NewRegistry()
	reg.MustRegister(admissionprom.Collector("checkout", g))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range m.GetLabel() {
				key += "," + l.GetName() + "=" + l.GetValue()
			}
			if m.Counter != nil {
				got[key] = m.GetCounter().GetValue()
			} else {
				got[key] = m.GetGauge().GetValue()
			}
		}
	}
	for key, want := range map[string]float64{
		"levee_rejected_total,app=checkout,reason=rate":              4, // 2 of the 6 pass (burst 2)
		"levee_shadow_rejected_total,app=checkout,reason=url-length": 1,
		"levee_concurrency_limit,app=checkout":                       7,
		"levee_inflight,app=checkout":                                0,
		"levee_queue_length,app=checkout":                            0,
	} {
		if got[key] != want {
			t.Errorf("%s = %v; want %v (all: %v)", key, got[key], want, got)
		}
	}
}

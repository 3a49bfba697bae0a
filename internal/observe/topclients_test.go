package observe

import (
	"fmt"
	"testing"

	"github.com/leveeproxy/levee/internal/topk"
)

type fakeApps []AppStats

func (f fakeApps) EachApp(fn func(AppStats)) {
	for _, a := range f {
		fn(a)
	}
}

// Client keys come from requests: invalid UTF-8 and keys that collide once
// made valid must not break a scrape.
func TestTopClientGaugesSurviveHostileKeys(t *testing.T) {
	m := NewMetrics(fakeApps{{Name: "a", TopClients: &topk.Clients{
		Requests: []topk.Entry{{Key: "\xff", Count: 9}, {Key: "\xfe", Count: 5}, {Key: "ok", Count: 1}},
	}}})
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() == "levee_top_client_requests" {
			for _, s := range mf.GetMetric() {
				got[s.GetLabel()[1].GetValue()] = s.GetGauge().GetValue()
			}
		}
	}
	if want := map[string]float64{"\uFFFD": 9, "ok": 1}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("series %v; want %v", got, want)
	}
}

//go:build !race

// Tests of allocations, built only without -race (sync.Pool drops items
// at random under it); CI runs every test in a "!race" file without
// -race (.ci/run).

package admission_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/leveeproxy/levee/admission"
)

// A refusal is most of the traffic under overload: it allocates nothing.
func TestGateRefusalAllocatesNothing(t *testing.T) {
	g, err := admission.NewGate(admission.Limits{Rate: admission.RequestRate{Events: 1, Per: time.Minute}, Burst: 1, URLLength: 64})
	if err != nil {
		t.Fatal(err)
	}
	h := g.Wrap(http.NotFoundHandler())
	w := &discard{h: http.Header{}}
	for name, r := range map[string]*http.Request{
		"rate":       httptest.NewRequest("GET", "/", nil),
		"url-length": httptest.NewRequest("GET", "/"+strings.Repeat("a", 100), nil),
	} {
		h.ServeHTTP(w, r) // the bucket's first and only request, and warm-up
		clear(w.h)
		if n := testing.AllocsPerRun(100, func() { clear(w.h); h.ServeHTTP(w, r) }); n != 0 {
			t.Errorf("%s refusal: %v allocations; want 0", name, n)
		}
		if got := w.h.Get("Levee-Reject"); got != name {
			t.Errorf("refused %q; want %q", got, name)
		}
	}
}

package forward

import (
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"

	"github.com/valyala/fasthttp"
)

// TestHTTPRespondCopiesAsCanonicalHeaderKey: respond gives the handler's
// header map what copying each field with http.CanonicalHeaderKey would,
// in two allocations whatever the fields.
func TestHTTPRespondCopiesAsCanonicalHeaderKey(t *testing.T) {
	var resp fasthttp.Response
	resp.Header.DisableNormalizing()
	resp.SetStatusCode(201)
	for _, f := range [][2]string{{"content-type", "text/plain"}, {"X-CUSTOM-thing", "a"}, {"Set-Cookie", "a=1"},
		{"set-cookie", "b=2"}, {"Connection", "x-hop"}, {"X-Hop", "dropped"}, {"x_under", "u"}, {"Etag", `"v"`}} {
		resp.Header.Add(f[0], f[1])
	}
	resp.Header.SetContentLength(123)
	want := http.Header{"Preset": {"p"}, "Content-Length": {"123"}}
	endToEnd(&resp.Header, func(k, v []byte) {
		key := http.CanonicalHeaderKey(string(k))
		want[key] = append(want[key], string(v))
	})
	if len(want) < 6 || want["X-Hop"] != nil {
		t.Fatalf("the fields to copy: %v", want)
	}
	rec := httptest.NewRecorder()
	d := &httpDown{w: rec}
	rec.Header().Set("Preset", "p")
	rec.Header().Set("Content-Length", "1")
	d.respond(&resp)
	if got := rec.Header(); !reflect.DeepEqual(got, want) {
		t.Fatalf("header\n%v\nwant\n%v", got, want)
	}
	if d.code != 201 {
		t.Fatalf("status %d", d.code)
	}
	h := rec.Header()
	h["Set-Cookie"] = append(h["Set-Cookie"], "c=3") // a handler's append copies
	if rec.Header()["Set-Cookie"][0] != "a=1" || len(h["Content-Type"]) != 1 {
		t.Fatal("an append overwrote another field's value")
	}
	allocs := testing.AllocsPerRun(100, func() {
		clear(h)
		d.respond(&resp)
	})
	// Two, and one for the second Set-Cookie's append, one for the
	// Connection field's tokens (endToEnd's).
	if allocs > 2+1+1 {
		t.Fatalf("%v allocations per respond, want at most 4", allocs)
	}
	t.Logf("%v allocations per respond of %d fields", allocs, len(h)+1)
}

package clientkey

import (
	"net/http/httptest"
	"testing"
)

func TestParseAndRead(t *testing.T) {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "192.0.2.7:5555"
	r.Header.Set("X-Api-Key", "tenant-a")
	r.Header.Set("Cookie", "sid=s1")
	for src, want := range map[string]string{
		"ip": "192.0.2.7", "header:X-Api-Key": "tenant-a", "header:x-api-key": "tenant-a",
		"cookie:sid": "s1", "cookie:none": "",
	} {
		k, err := Parse(src)
		if err != nil {
			t.Fatalf("Parse(%q): %v", src, err)
		}
		if got := k.HTTP(r); got != want {
			t.Errorf("%s: key %q; want %q", src, got, want)
		}
	}
	for _, bad := range []string{"", "cookie", "header:", "query:a", "header:a b", "header:a:b"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
		if New(bad) != (Source{}) {
			t.Errorf("New(%q) is not the zero Source", bad)
		}
	}
}

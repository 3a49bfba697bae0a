package catalog

import (
	"strconv"
	"testing"
)

func TestLookup(t *testing.T) {
	ix := Build([]Entry[string]{
		{Hosts: []string{"photos.example.com", "*.photos.example.com"}, Paths: []string{"/"}, Value: "photos"},
		{Hosts: []string{"photos.example.com"}, Paths: []string{"/api", "/v2/"}, Value: "photos-api"},
		{Hosts: []string{"*.example.com"}, Paths: []string{"/"}, Value: "catchall"},
		{Hosts: []string{"Upper.Example.org."}, Paths: []string{"/"}, Value: "upper"},
		{Hosts: []string{"only.example.net"}, Paths: []string{"/x"}, Value: "only-x"},
	})
	tests := []struct {
		host, path, want string
		ok               bool
	}{
		{"photos.example.com", "/", "photos", true},
		{"photos.example.com:8080", "/a/b", "photos", true},
		{"PHOTOS.example.com", "/", "photos", true},
		{"photos.example.com.", "/", "photos", true},
		{"photos.example.com", "/api", "photos-api", true},
		{"photos.example.com", "/api/users", "photos-api", true},
		{"photos.example.com", "/apix", "photos", true}, // segment boundary
		{"photos.example.com", "/v2/x", "photos-api", true},
		{"photos.example.com", "/v2", "photos", true}, // "/v2/" needs the slash
		{"a.photos.example.com", "/", "photos", true},
		{"a.b.photos.example.com", "/", "photos", true}, // longest wildcard suffix wins
		{"x.example.com", "/", "catchall", true},        // shorter wildcard
		{"example.com", "/", "", false},                 // a wildcard does not match its apex
		{"upper.example.org", "/", "upper", true},       // config letter case and dot ignored
		{"only.example.net", "/y", "", false},           // no path claims /y
		{"only.example.net", "/x/1", "only-x", true},    //
		{"evil.com", "/", "", false},                    // never an open proxy
		{"[::1]:8080", "/", "", false},                  //
		{"", "/", "", false},                            //
		{"127.0.0.1", "/", "", false},                   //
	}
	for _, tt := range tests {
		got, ok := ix.Lookup(tt.host, tt.path)
		if got != tt.want || ok != tt.ok {
			t.Errorf("Lookup(%q, %q) = %q, %v; want %q, %v", tt.host, tt.path, got, ok, tt.want, tt.ok)
		}
	}
}

func TestNilIndexFindsNothing(t *testing.T) {
	var ix *Index[int]
	if _, ok := ix.Lookup("a", "/"); ok {
		t.Fatal("nil index found a route")
	}
}

func TestLookupDoesNotAllocate(t *testing.T) {
	ix := Build([]Entry[int]{{Hosts: []string{"a.example.com", "*.b.example.com"}, Paths: []string{"/", "/api"}, Value: 1}})
	allocs := testing.AllocsPerRun(1000, func() {
		ix.Lookup("a.example.com:8080", "/api/x")
		ix.Lookup("z.b.example.com", "/")
	})
	if allocs != 0 {
		t.Fatalf("Lookup allocates %v times per run; want 0", allocs)
	}
}

func BenchmarkLookup(b *testing.B) {
	var entries []Entry[int]
	for i := range 1000 {
		entries = append(entries, Entry[int]{Hosts: []string{hostN(i)}, Paths: []string{"/"}, Value: i})
	}
	ix := Build(entries)
	b.ReportAllocs()
	for b.Loop() {
		ix.Lookup("app500.example.com", "/some/path")
	}
}

func hostN(i int) string { return "app" + strconv.Itoa(i) + ".example.com" }

package urlpath

import "testing"

func TestHasPrefix(t *testing.T) {
	for _, c := range []struct {
		path, prefix string
		want         bool
	}{
		{"/api", "/api", true}, {"/api/x", "/api", true}, {"/apix", "/api", false},
		{"/api/x", "/api/", true}, {"/", "/", true}, {"/a", "/", true}, {"/ap", "/api", false},
	} {
		if got := HasPrefix(c.path, c.prefix); got != c.want {
			t.Errorf("HasPrefix(%q, %q) = %v; want %v", c.path, c.prefix, got, c.want)
		}
	}
}

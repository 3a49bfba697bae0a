package sni

import (
	"testing"

	"github.com/leveeproxy/levee/internal/config"
)

// The config file's table knows each host by its exact name, then by the
// wildcard patterns covering it; a host it knows is never looked for in
// the catalog, one it does not is.
func TestTableLookup(t *testing.T) {
	cfg, err := config.Parse([]byte(`listen: 127.0.0.1:0
apps:
  a: {hosts: [a.test, "*.w.test"], backends: [127.0.0.1:9]}
`))
	if err != nil {
		t.Fatal(err)
	}
	tab := NewTable(cfg)
	for host, want := range map[string]bool{"a.test": true, "x.w.test": true, "y.x.w.test": true, "w.test": false, "b.test": false} {
		if c, ok := tab.lookup(host); ok != want || c != nil {
			t.Errorf("lookup(%q) = %v, %v; want nil, %v", host, c, ok, want)
		}
	}
}

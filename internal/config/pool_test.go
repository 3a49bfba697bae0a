package config

import (
	"testing"

	"go.yaml.in/yaml/v3"
)

const perPathSrc = `
apps:
  shop:
    hosts: [shop.example.com]
    backends: [127.0.0.1:9001]
    limits:
      body: 1MB
      batch: {json_field: uris, max: 100}
      per_path:
        /upload: {body: 1GB, header_count: 20}
        /upload/none: {body: 0}
        /batch: {batch: {max: 5}}
        /ids: {batch: {json_field: ids}}
`

// TestShapeForInherits: a per-path entry changes only the keys it sets;
// an explicit 0 is a value, not "left out".
func TestShapeForInherits(t *testing.T) {
	l := mustParse(t, perPathSrc).Apps["shop"].Limits
	app := DefaultApp().Limits
	cases := []struct {
		prefix      string
		body        ByteSize
		headerCount int
		batch       Batch
	}{
		{"/", 1_000_000, app.HeaderCount, Batch{"uris", 100}}, // no entry: the app's
		{"/upload", 1_000_000_000, 20, Batch{"uris", 100}},
		{"/upload/none", 0, app.HeaderCount, Batch{"uris", 100}},
		{"/batch", 1_000_000, app.HeaderCount, Batch{"uris", 5}},
		{"/ids", 1_000_000, app.HeaderCount, Batch{"ids", 100}},
	}
	for _, c := range cases {
		got := l.ShapeFor(c.prefix)
		if got.Body != c.body || got.HeaderCount != c.headerCount || got.Batch != c.batch ||
			got.URLLength != app.URLLength || got.QueryValues != app.QueryValues || got.HeaderBytes != app.HeaderBytes {
			t.Errorf("ShapeFor(%s) = body %d, header_count %d, batch %+v, url %d; want %d, %d, %+v and the app's others",
				c.prefix, got.Body, got.HeaderCount, got.Batch, got.URLLength, c.body, c.headerCount, c.batch)
		}
	}
}

// TestPerPathPrintsBack: a printed config with per-path entries parses to
// the same limits.
func TestPerPathPrintsBack(t *testing.T) {
	cfg := mustParse(t, perPathSrc)
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	again, err := Parse(out)
	if err != nil {
		t.Fatalf("printed config does not parse: %v\n%s", err, out)
	}
	for prefix, want := range cfg.Apps["shop"].Limits.PerPath {
		if got := again.Apps["shop"].Limits.PerPath[prefix]; got == nil || *got != *want {
			t.Errorf("per_path %s: printed and parsed %+v, want %+v", prefix, got, want)
		}
	}
}

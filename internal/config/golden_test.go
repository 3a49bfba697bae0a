package config

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// render is what `levee check` would show for src: every problem, one per
// line, or the whole resolved config (defaults included) when it is valid.
func render(src []byte) []byte {
	cfg, err := Parse(src)
	if err != nil {
		var es Errors
		if !errors.As(err, &es) {
			return []byte("unexpected error type: " + err.Error() + "\n")
		}
		var b bytes.Buffer
		for _, e := range es {
			b.WriteString(e.Error() + "\n")
		}
		return b.Bytes()
	}
	if !DefaultEventLoop && !cfg.Server.EventLoop {
		cfg.Server.EventLoop = true // the goldens hold linux's default
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		return []byte("marshal: " + err.Error() + "\n")
	}
	return append([]byte("# valid; with defaults:\n"), out...)
}

// TestGolden parses each testdata/NAME.yaml and compares the result with
// testdata/NAME.golden. Run `go test ./internal/config -run Golden -update`
// after an intended change, and review the diff.
func TestGolden(t *testing.T) {
	inputs, err := filepath.Glob("testdata/*.yaml")
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no testdata: %v", err)
	}
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".yaml")
		t.Run(name, func(t *testing.T) {
			src, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			got := render(src)
			golden := strings.TrimSuffix(in, ".yaml") + ".golden"
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s differs from %s (run with -update if intended)\n--- got:\n%s\n--- want:\n%s", in, golden, got, want)
			}
		})
	}
}

// FuzzParse checks that Parse never panics, always returns exactly one of a
// config and non-empty Errors, and is deterministic.
func FuzzParse(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/*.yaml")
	examples, _ := filepath.Glob("../../examples/*.yaml")
	for _, p := range append(seeds, examples...) {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(exampleConfig))
	f.Add([]byte("a: &a [*a]\nlisten: *a\n"))
	f.Add([]byte("apps: &x {a: *x}\n"))
	f.Fuzz(func(t *testing.T, src []byte) {
		cfg, err := Parse(src)
		if (cfg == nil) == (err == nil) {
			t.Fatalf("Parse returned config %v and error %v; want exactly one", cfg != nil, err)
		}
		if err != nil {
			var es Errors
			if !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("error %T %v, want non-empty Errors", err, err)
			}
			for _, e := range es {
				if e.Msg == "" {
					t.Fatalf("empty message at %q", e.Path)
				}
			}
		} else if err := cfg.Validate(); err != nil {
			t.Fatalf("Parse accepted a config that Validate rejects: %v", err)
		}
		if again := render(src); !bytes.Equal(again, render(src)) {
			t.Fatalf("Parse is not deterministic for %q", src)
		}
	})
}

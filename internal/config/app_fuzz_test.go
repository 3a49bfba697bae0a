package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// FuzzParseApp checks the catalog's app decoder on arbitrary bytes: no
// panic, exactly one of an app and non-empty Errors, and an accepted app
// survives the catalog's round trip. That trip is the stored form (JSON as
// sent, or the YAML import's json.Marshal of the decoded value), the export
// line (sqlitestore Export: the stored object with "name" added) and the
// import of that line (ParseAppJSON), which must decode to an equal app.
func FuzzParseApp(f *testing.F) {
	f.Add("shop", []byte(`{"hosts": ["shop.example"], "backends": ["127.0.0.1:9001"], "limits": {"concurrency": 7}}`))
	f.Add("shop", []byte(`{"hosts": ["shop.example"], "backends": [], "limits": {"concurency": 7}}`))
	f.Add("a", []byte("hosts: [a.test, '*.b.test']\nbackends:\n  - 127.0.0.1:1\n  - address: 127.0.0.1:2\n    weight: 3\nlimits: {rate: 10/s, body: 1MiB}\n"))
	f.Add("a", []byte("hosts: [a.test]\nbackends: [127.0.0.1:1]\nhealth: {path: /h, interval: 1s}\nretry: {attempts: 2}\n"))
	f.Add("a", []byte(`{"hosts":["a.test"],"backends":["127.0.0.1:1"],"hosts":["b.test"]}`))
	f.Add("a", []byte(`{"hosts":["a.test"],"backends":["127.0.0.1:1"],"name":"b","limits":{"concurrency":9007199254740993}}`))
	f.Add("a", []byte("x: &x {a: *x}\n"))
	f.Add("", []byte("null"))
	f.Fuzz(func(t *testing.T, name string, data []byte) {
		a, err := ParseApp(name, data)
		if (a == nil) == (err == nil) {
			t.Fatalf("ParseApp returned app %v and error %v; want exactly one", a != nil, err)
		}
		if err != nil {
			var es Errors
			if !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("error %T %v, want non-empty Errors", err, err)
			}
			return
		}
		if len(a.Hosts) == 0 || len(a.Backends) == 0 {
			t.Fatalf("accepted an app with %d hosts and %d backends", len(a.Hosts), len(a.Backends))
		}
		if name == "" {
			return // no export line can carry an empty name (ParseAppJSON refuses it)
		}
		stored := data
		if !json.Valid(data) {
			var raw any
			if yaml.Unmarshal(data, &raw) != nil {
				return
			}
			b, err := json.Marshal(raw)
			if err != nil {
				return // the YAML import refuses it: "cannot be stored as JSON"
			}
			stored = b
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(stored, &m); err != nil {
			t.Fatalf("accepted app's stored form %q is not a JSON object: %v", stored, err)
		}
		m["name"], _ = json.Marshal(name)
		line, _ := json.Marshal(m)
		src, err := ParseAppJSON(line, 1)
		if err != nil {
			t.Fatalf("export line %s does not import: %v", line, err)
		}
		if !reflect.DeepEqual(src.App, a) {
			t.Fatalf("export and import changed the app:\nbefore %+v\nafter  %+v\nline %s", a, src.App, line)
		}
	})
}

// FuzzJSONDocument checks ParseApp's JSON path against the YAML parser it
// stands in for: whenever jsonDocument takes a document, yaml.v3 must read
// the same tree (kinds, resolved tags, values), so a stored app decodes to
// the same config, and the same errors, whichever parser reads it.
func FuzzJSONDocument(f *testing.F) {
	f.Add([]byte(`{"hosts": ["shop.example"], "backends": ["127.0.0.1:9001"], "limits": {"concurrency": 7, "rate": "10/s"}}`))
	f.Add([]byte(`{"a": [1, -0, 1.5, 1e3, 99999999999999999999, 9007199254740993, true, false, null, "x\u00e9\n"], "b": {}}`))
	f.Add([]byte(`{"hosts":["a.test"],"hosts":["b.test"]}`))
	f.Add([]byte(`{"a": "\ud83d\ude00", "b": "10", "c": "true", "d": ""} `))
	f.Add([]byte(`{"a": 1} {"b": 2}`))
	f.Add([]byte(`{"a": "x\"y\/z\u00e9", "b": [[], {}, [{"c": -0.5e-3}]]}`))
	f.Add([]byte(`{"d": 01}`))
	f.Add([]byte("{\"\"\n:[0]}"))
	f.Add([]byte("{\"a\" \r:1}"))
	f.Add([]byte(`{"` + strings.Repeat("k", 1021) + `" :1}`))
	f.Add([]byte(`{"` + strings.Repeat("k", 1022) + `" :1}`))
	f.Add([]byte(`{"é` + strings.Repeat("k", 1021) + `":1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		j, ok := jsonDocument(data)
		if !ok {
			return
		}
		if !json.Valid(data) {
			t.Fatalf("jsonDocument took %q, which is not JSON", data)
		}
		y, err := parseDocument(data)
		if err != nil {
			t.Fatalf("jsonDocument took %q, which YAML refuses: %v", data, err)
		}
		if d := sameTree(j, y, "$"); d != "" {
			t.Fatalf("%q: %s", data, d)
		}
	})
}

// sameTree reports the first difference between two node trees, "" if none.
func sameTree(j, y *yaml.Node, at string) string {
	y = resolve(y)
	switch {
	case j.Kind != y.Kind:
		return fmt.Sprintf("%s: kind %v, YAML %v", at, j.Kind, y.Kind)
	case j.ShortTag() != y.ShortTag():
		return fmt.Sprintf("%s: tag %s, YAML %s", at, j.ShortTag(), y.ShortTag())
	case j.Kind == yaml.ScalarNode && j.Value != y.Value:
		return fmt.Sprintf("%s: value %q, YAML %q", at, j.Value, y.Value)
	case len(j.Content) != len(y.Content):
		return fmt.Sprintf("%s: %d children, YAML %d", at, len(j.Content), len(y.Content))
	}
	for i := range j.Content {
		if d := sameTree(j.Content[i], y.Content[i], fmt.Sprintf("%s[%d]", at, i)); d != "" {
			return d
		}
	}
	return ""
}

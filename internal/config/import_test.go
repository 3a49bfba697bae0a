package config

import (
	"strings"
	"testing"
)

func TestReadImportReportsEveryProblem(t *testing.T) {
	src := `{"name":"a","hosts":["a.example"],"backends":["127.0.0.1:1"]}
{"name":"b","hosts":[],"backends":["127.0.0.1:1"]}
not json
{"name":"a","hosts":["c.example"],"backends":["127.0.0.1:1"]}
`
	_, err := ReadImport("apps.jsonl", strings.NewReader(src))
	for _, want := range []string{"apps.b.hosts: at least one host", "line 3:", "line 4: app a is already on line 1"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want %q", err, want)
		}
	}
}

func TestAppJSONLineReadsBack(t *testing.T) {
	line, err := AppJSONLine("shop", []byte(`{"hosts":["shop.example"],"backends":["127.0.0.1:1"]}`))
	if err != nil || !strings.HasSuffix(string(line), "}\n") {
		t.Fatalf("%q %v", line, err)
	}
	a, err := ParseAppJSON(line, 1)
	if err != nil || a.Name != "shop" || a.App.Hosts[0] != "shop.example" {
		t.Errorf("read back: %+v %v", a, err)
	}
	if _, err := AppJSONLine("bad", []byte(`[1]`)); err == nil {
		t.Error("a stored config that is not an object must be refused")
	}
}

package config

import (
	"strings"
	"testing"
)

func TestParseLimits(t *testing.T) {
	l, err := ParseLimits([]byte("concurrency: 1\nqueue: {max_len: 0}\nrate: 10/s\nburst: 2\nbody: 1KB\n"))
	if err != nil {
		t.Fatal(err)
	}
	if l.Concurrency.Limit != 1 || l.Queue.MaxLen != 0 || l.Burst != 2 || l.Body != 1000 {
		t.Fatalf("got %+v", l)
	}
	if l.HeaderCount != DefaultHeaderCount || l.Client.Key != "ip" {
		t.Fatalf("defaults not applied: %+v", l)
	}
	d, err := ParseLimits(nil)
	if err != nil || d.Concurrency.Limit != DefaultConcurrency {
		t.Fatalf("empty: %+v, %v", d, err)
	}
	for in, want := range map[string]string{
		"burst: 3\n":                 "limits.burst: needs limits.rate",
		"concurrency: 0\n":           "limits.concurrency:",
		"client: {key: cookie}\n":    "limits.client.key:",
		"per_path: {x: {body: 1}}\n": "limits.per_path.x:",
		"nope: 1\n":                  "limits.nope",
	} {
		_, err := ParseLimits([]byte(in))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseLimits(%q) = %v, want %q", in, err, want)
		}
	}
}

package config

import (
	"strings"
	"testing"
)

// A reload may change the apps, not what levee opened at start: each
// such change is refused with an error that names it.
func TestReloadable(t *testing.T) {
	const base = "listen: 127.0.0.1:8080\napps:\n  a: {hosts: [a.test], backends: [127.0.0.1:9]}\n"
	old, err := Parse([]byte(base))
	if err != nil {
		t.Fatal(err)
	}
	for change, want := range map[string]string{
		"":                                 "",
		"log: {level: debug}\n":            "",
		"listen: 127.0.0.1:8081\n":         "listen changed",
		"server: {max_conns: 7}\n":         "server settings changed",
		"log: {format: json}\n":            "log.format changed",
		"instance: {unexpected: strict}\n": "instance.lock or instance.unexpected changed",
	} {
		y := base
		if strings.HasPrefix(change, "listen:") {
			y = strings.Replace(base, "listen: 127.0.0.1:8080\n", change, 1)
		} else {
			y += change
		}
		cfg, err := Parse([]byte(y))
		if err != nil {
			t.Fatalf("%q: %v", change, err)
		}
		err = Reloadable(old, cfg)
		if (err == nil) != (want == "") || err != nil && !strings.Contains(err.Error(), want) {
			t.Errorf("%q: Reloadable = %v, want %q", change, err, want)
		}
	}
}

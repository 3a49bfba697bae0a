package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestTable(t *testing.T) {
	card := filepath.Join(t.TempDir(), "card.json")
	if err := os.WriteFile(card, []byte(`{"drills": [
	  {"drill": "tenant-limit", "verdict": "fail", "ratios": {"admitted/limit": 9.704, "other tenant success": 1},
	   "checks": [{"name": "admitted rate", "pass": false}, {"name": "other tenant's success", "pass": true}]},
	  {"drill": "duplicate-instance", "verdict": "skipped", "reason": "needs --config | x", "checks": []},
	  {"drill": "slow-clients", "verdict": "fail", "ratios": {"victim success": 0.457, "victim p99 during/before": 31.2},
	   "checks": [{"name": "victim's success under attack", "pass": false}, {"name": "victim's latency under attack", "pass": false}]},
	  {"drill": "overload", "verdict": "fail", "ratios": {"goodput/capacity": 0.93, "served p99 overload/unloaded": 12.4, "excess refused at once": 0.861},
	   "checks": [{"name": "goodput", "pass": true}, {"name": "served latency", "pass": false}, {"name": "refused at once", "pass": false}]}
	]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := table([]string{"caddy=" + card, "traefik=note:skipped: not installed"})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(got), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d lines; want header, rule and 2 rows:\n%s", len(lines), got)
	}
	want := "| caddy | 9.70 | 1.00 | – | – | – | – | – | – | 0.46 | 31.20 | 0.93 | 12.40 | 0.86 | tenant-limit: FAIL (admitted rate); " +
		"duplicate-instance: SKIPPED (needs --config / x); " +
		"slow-clients: FAIL (victim's success under attack; victim's latency under attack); overload: FAIL (served latency; refused at once) |"
	if lines[2] != want {
		t.Errorf("row\n%s\nwant\n%s", lines[2], want)
	}
	if cells := strings.Count(lines[3], "|"); cells != strings.Count(lines[0], "|") {
		t.Errorf("note row has %d cell borders, header %d:\n%s", cells, strings.Count(lines[0], "|"), got)
	}
	if _, err := table([]string{"nolabel"}); err == nil {
		t.Error("an argument without LABEL=: want an error")
	}
}

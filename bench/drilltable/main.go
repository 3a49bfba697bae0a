// Command drilltable turns `levee drill --json` report cards, one per edge,
// into the Markdown table bench/run.sh writes to docs/benchmarks.md.
//
//	go run ./bench/drilltable levee=card-levee.json nginx=card-nginx.json ...
//
// A LABEL=note:TEXT argument adds a row for an edge that was skipped.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

type card struct {
	Drills []struct {
		Drill   string             `json:"drill"`
		Verdict string             `json:"verdict"`
		Reason  string             `json:"reason"`
		Ratios  map[string]float64 `json:"ratios"`
		Checks  []struct {
			Name string `json:"name"`
			Pass bool   `json:"pass"`
		} `json:"checks"`
	} `json:"drills"`
}

// columns: drill, ratio name, heading.
var columns = [][3]string{
	{"tenant-limit", "admitted/limit", "tenant-limit: admitted ÷ limit"},
	{"tenant-limit", "other tenant success", "other tenant's success"},
	{"batch-storm", "batches refused", "batch-storm: batches refused"},
	{"batch-storm", "normal p99 during/before", "normal p99 during ÷ before"},
	{"distribution", "fast max/mean", "distribution: fast max ÷ mean"},
	{"distribution", "slow/fast mean", "slow ÷ fast mean"},
	{"cold-catalog", "hot p99 during/before", "cold-catalog: hot p99 during ÷ before"},
	{"duplicate-instance", "admitted by both/limit", "duplicate-instance: admitted ÷ limit"},
	{"slow-clients", "victim success", "slow-clients: victim's success"},
	{"slow-clients", "victim p99 during/before", "victim p99 during ÷ before"},
	{"overload", "goodput/capacity", "overload: goodput ÷ capacity"},
	{"overload", "served p99 overload/unloaded", "served p99 ÷ unloaded"},
	{"overload", "excess refused at once", "excess refused at once"},
}

var drills = []string{"tenant-limit", "batch-storm", "distribution", "cold-catalog", "duplicate-instance", "slow-clients", "overload"}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: drilltable LABEL=CARD.json|LABEL=note:TEXT ...")
		os.Exit(2)
	}
	t, err := table(os.Args[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "drilltable: %v\n", err)
		os.Exit(1)
	}
	fmt.Print(t)
}

// table is the Markdown table of the cards named by args (LABEL=FILE or LABEL=note:TEXT).
func table(args []string) (string, error) {
	var b strings.Builder
	b.WriteString("| edge |")
	for _, c := range columns {
		b.WriteString(" " + c[2] + " |")
	}
	b.WriteString(" verdicts |\n|---|")
	b.WriteString(strings.Repeat("---|", len(columns)+1) + "\n")
	for _, arg := range args {
		label, path, ok := strings.Cut(arg, "=")
		if !ok {
			return "", fmt.Errorf("%q: want LABEL=FILE", arg)
		}
		if note, isNote := strings.CutPrefix(path, "note:"); isNote {
			fmt.Fprintf(&b, "| %s |%s %s |\n", label, strings.Repeat(" |", len(columns)), note)
			continue
		}
		data, err := os.ReadFile(path)
		var c card
		if err == nil {
			err = json.Unmarshal(data, &c)
		}
		if err != nil {
			return "", fmt.Errorf("%s: %w", path, err)
		}
		fmt.Fprintf(&b, "| %s |", label)
		for _, col := range columns {
			cell := "–"
			for _, d := range c.Drills {
				if v, ok := d.Ratios[col[1]]; ok && d.Drill == col[0] {
					cell = fmt.Sprintf("%.2f", v)
				}
			}
			b.WriteString(" " + cell + " |")
		}
		b.WriteString(" " + strings.Join(verdicts(c), "; ") + " |\n")
	}
	return b.String(), nil
}

// verdicts is "drill: VERDICT (failed checks, or why skipped)" per drill, in order.
func verdicts(c card) []string {
	var vs []string
	for _, name := range drills {
		for _, d := range c.Drills {
			if d.Drill != name {
				continue
			}
			v := strings.ToUpper(d.Verdict)
			var failed []string
			for _, ch := range d.Checks {
				if !ch.Pass {
					failed = append(failed, ch.Name)
				}
			}
			if len(failed) > 0 {
				v += " (" + strings.Join(failed, "; ") + ")"
			}
			if d.Verdict == "skipped" || d.Verdict == "error" {
				v += " (" + strings.ReplaceAll(d.Reason, "|", "/") + ")"
			}
			vs = append(vs, name+": "+v)
		}
	}
	return vs
}

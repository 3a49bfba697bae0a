package drill

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// Verdicts of a drill.
const (
	Pass    = "pass"
	Fail    = "fail"
	Skipped = "skipped" // the drill does not apply (a flag or a feature is missing)
	Errored = "error"   // the drill could not run (the target is unreachable, ...)
)

// Check is one graded property of the edge.
type Check struct {
	Name string `json:"name"`
	Pass bool   `json:"pass"`
	Got  string `json:"got"`
	Want string `json:"want"`
}

// Stream is a stream's outcome in a report.
type Stream struct {
	Name      string           `json:"name"`
	RateRPS   float64          `json:"offered_rps"` // scheduled / window
	Scheduled int64            `json:"scheduled"`
	Sent      int64            `json:"sent"`
	Overflow  int64            `json:"overflow"` // due while max in-flight were outstanding: never sent, a failure
	OK        int64            `json:"ok"`
	Non2xx    int64            `json:"non_2xx"`
	Timeouts  int64            `json:"timeouts"`
	Errors    int64            `json:"errors"`
	Codes     map[string]int64 `json:"codes"`
	P50MS     float64          `json:"p50_ms"` // every response, from its intended send time
	P99MS     float64          `json:"p99_ms"`
	MaxMS     float64          `json:"max_ms"`
}

// Report is one drill's outcome.
type Report struct {
	Drill    string   `json:"drill"`
	Incident string   `json:"incident"`
	Target   string   `json:"target"`
	Verdict  string   `json:"verdict"`
	Reason   string   `json:"reason,omitempty"` // why skipped or errored
	Checks   []Check  `json:"checks"`
	Streams  []Stream `json:"streams"`
	Notes    []string `json:"notes,omitempty"`
	// Ratios are the drill's headline numbers, for comparing edges (bench/run.sh).
	Ratios  map[string]float64 `json:"ratios,omitempty"`
	Seconds float64            `json:"seconds"`
}

// grade sets the verdict from the checks: fail if any failed.
func (r *Report) grade() {
	r.Verdict = Pass
	for _, c := range r.Checks {
		if !c.Pass {
			r.Verdict = Fail
		}
	}
}

func (r *Report) ratio(name string, v float64) {
	if r.Ratios == nil {
		r.Ratios = map[string]float64{}
	}
	r.Ratios[name] = round3(v)
}

// p99Ratio is under's p99 over base's (successful responses); 0 without data.
func p99Ratio(base, under *Result) float64 {
	b := base.OKLat.Quantile(0.99)
	if b <= 0 {
		return 0
	}
	return float64(under.OKLat.Quantile(0.99)) / float64(b)
}

func (r *Report) add(res ...*Result) {
	for _, x := range res {
		r.Streams = append(r.Streams, summarize(x))
	}
}

func summarize(x *Result) Stream {
	return Stream{
		Name: x.Name, RateRPS: math.Round(10*x.OfferedRate()) / 10, Scheduled: x.Scheduled, Sent: x.Sent,
		Overflow: x.Overflow, OK: x.OK, Non2xx: x.Non2xx, Timeouts: x.Timeouts, Errors: x.Errors,
		Codes: x.Codes(), P50MS: ms(x.All.Quantile(0.5)), P99MS: ms(x.All.Quantile(0.99)), MaxMS: ms(x.All.Max()),
	}
}

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

// Card is the report card of one `levee drill` run.
type Card struct {
	Target  string    `json:"target"`
	Started time.Time `json:"started"`
	Verdict string    `json:"verdict"` // fail if any drill failed or errored
	Reports []*Report `json:"drills"`
}

// NewCard collects reports; its verdict is pass only if no drill failed or
// errored and at least one passed.
func NewCard(target string, started time.Time, reports []*Report) *Card {
	c := &Card{Target: target, Started: started.UTC().Truncate(time.Second), Reports: reports, Verdict: Pass}
	passed := 0
	for _, r := range reports {
		switch r.Verdict {
		case Fail, Errored:
			c.Verdict = Fail
		case Pass:
			passed++
		}
	}
	if passed == 0 && c.Verdict == Pass {
		c.Verdict = Skipped
	}
	return c
}

// WriteJSON writes the card as indented JSON.
func (c *Card) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(c)
}

// WriteTable writes the card as plain-text tables: one line per check.
func (c *Card) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "DRILL\tCHECK\tRESULT\tGOT\tWANT\n")
	for _, r := range c.Reports {
		if len(r.Checks) == 0 {
			fmt.Fprintf(tw, "%s\t-\t%s\t%s\t\n", r.Drill, strings.ToUpper(r.Verdict), r.Reason)
			continue
		}
		for _, ch := range r.Checks {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Drill, ch.Name, passFail(ch.Pass), ch.Got, ch.Want)
		}
	}
	fmt.Fprintf(tw, "\nDRILL\tSTREAM\tOFFERED/S\tSENT\tOK\tNON-2XX\tTIMEOUT\tERROR\tOVERFLOW\tP50 MS\tP99 MS\n")
	for _, r := range c.Reports {
		for _, s := range r.Streams {
			fmt.Fprintf(tw, "%s\t%s\t%g\t%d\t%d\t%d\t%d\t%d\t%d\t%g\t%g\n", r.Drill, s.Name, s.RateRPS, s.Sent, s.OK,
				s.Non2xx, s.Timeouts, s.Errors, s.Overflow, s.P50MS, s.P99MS)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range c.Reports {
		for _, n := range r.Notes {
			fmt.Fprintf(w, "%s: %s\n", r.Drill, n)
		}
	}
	_, err := fmt.Fprintf(w, "\n%s: %s\n", c.Target, strings.ToUpper(c.Verdict))
	return err
}

func passFail(ok bool) string {
	if ok {
		return "PASS"
	}
	return "FAIL"
}

// WriteMarkdown writes the card as a Markdown report card.
func (c *Card) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# levee drill report card\n\nTarget `%s`, %s: **%s**\n\n", c.Target, c.Started.Format("2006-01-02 15:04 UTC"), strings.ToUpper(c.Verdict))
	b.WriteString("| drill | verdict | incident |\n| --- | --- | --- |\n")
	for _, r := range c.Reports {
		v := strings.ToUpper(r.Verdict)
		if r.Reason != "" {
			v += " (" + mdCell(r.Reason) + ")"
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", r.Drill, v, mdCell(r.Incident))
	}
	for _, r := range c.Reports {
		if len(r.Checks) == 0 && len(r.Streams) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n## %s: %s\n\n", r.Drill, strings.ToUpper(r.Verdict))
		if len(r.Checks) > 0 {
			b.WriteString("| check | result | got | want |\n| --- | --- | --- | --- |\n")
			for _, ch := range r.Checks {
				fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", mdCell(ch.Name), passFail(ch.Pass), mdCell(ch.Got), mdCell(ch.Want))
			}
		}
		if len(r.Streams) > 0 {
			b.WriteString("\n| stream | offered/s | sent | ok | non-2xx | timeouts | errors | overflow | p50 ms | p99 ms | statuses |\n")
			b.WriteString("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
			for _, s := range r.Streams {
				fmt.Fprintf(&b, "| %s | %g | %d | %d | %d | %d | %d | %d | %g | %g | %s |\n", s.Name, s.RateRPS, s.Sent, s.OK,
					s.Non2xx, s.Timeouts, s.Errors, s.Overflow, s.P50MS, s.P99MS, codes(s.Codes))
			}
		}
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "\n%s\n", mdCell(n))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func mdCell(s string) string {
	return strings.NewReplacer("|", "\\|", "\n", " ").Replace(s)
}

func codes(m map[string]int64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s: %d", k, m[k])
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

func pct(v float64) string { return fmt.Sprintf("%.2f%%", 100*v) }

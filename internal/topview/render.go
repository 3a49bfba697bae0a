package topview

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/leveeproxy/levee/internal/apps"
	"github.com/leveeproxy/levee/internal/topk"
)

// View is what a frame shows besides the snapshot.
type View struct {
	// Admin is the admin API's address, for the header.
	Admin string
	// Selected marks an app's row ("": the snapshot's App).
	Selected string
	// By and Window are what the heaviest clients were asked by, shown
	// until a snapshot reports them.
	By, Window string
	// Interval is the refresh interval (0: a single frame, no key help).
	Interval time.Duration
	// Status, when not "", replaces the help line: "disconnected: …".
	Status string
}

// Render draws s (nil: nothing read yet) as at most height lines of at
// most width columns each, sanitized: no line holds a control character
// or would wrap. width or height ≤ 0 does not bound that dimension, for
// plain text to a pipe. The frame is a header (3 lines), then the apps,
// the selected app's heaviest clients and its backends, each a blank
// line, a title and column names and as many rows as fit, shared out
// between the three one row at a time.
func Render(s *Snapshot, v View, width, height int) []string {
	if s == nil {
		s = &Snapshot{}
	}
	sel := v.Selected
	if sel == "" && s.App != nil {
		sel = s.App.Name
	}
	if s.Top != nil {
		v.By, v.Window = s.Top.By, s.Top.Window
	}
	apps := appsSection(s, sel)
	top := topSection(s, v)
	backends := backendsSection(s)
	sections := []*section{&apps, &top, &backends}
	const headerLines = 3
	// A section takes a blank line, a title and column names; on a screen
	// too short for a row of each besides, the blank lines go.
	gap := 1
	if height > 0 && height < headerLines+4*len(sections) {
		gap = 0
	}
	if height > 0 {
		share(sections, height-headerLines-(gap+2)*len(sections))
	} else {
		for _, sec := range sections {
			sec.show = len(sec.rows)
		}
	}
	lines := header(s, v)
	for height > 0 && len(lines) < headerLines { // a fixed height for the layout
		lines = append(lines, "")
	}
	for _, sec := range sections {
		if gap > 0 {
			lines = append(lines, "")
		}
		lines = append(lines, sec.title, sec.cols)
		lines = append(lines, sec.visible()...)
	}
	if height > 0 && len(lines) > height {
		lines = lines[:height]
	}
	for i, l := range lines {
		lines[i] = fit(l, width)
	}
	return lines
}

// section is a titled table; rows[first:first+show] are drawn.
type section struct {
	title, cols string
	rows        []string
	keep        int // a row that must stay visible (the selected app); -1: none
	first, show int
}

func (s *section) visible() []string {
	return s.rows[s.first : s.first+s.show]
}

// share gives sections n rows in all, one at a time round the sections
// that have rows left to show, and scrolls each to keep its keep row.
func share(sections []*section, n int) {
	for _, s := range sections {
		s.show = 0
	}
	for n > 0 {
		gave := false
		for _, s := range sections {
			if n > 0 && s.show < len(s.rows) {
				s.show++
				n--
				gave = true
			}
		}
		if !gave {
			break
		}
	}
	for _, s := range sections {
		if s.keep >= s.show {
			s.first = s.keep - s.show + 1
		}
	}
}

func header(s *Snapshot, v View) []string {
	in := s.Instance
	first := "levee top"
	if in.Build.Version != "" {
		first = "levee " + in.Build.Version
		if r := in.Build.Revision; r != "" {
			first += " (" + r[:min(len(r), 12)] + ")"
		}
	}
	if v.Admin != "" {
		first += " at " + v.Admin
	}
	if !s.Time.IsZero() {
		first += "   " + s.Time.UTC().Format("2006-01-02 15:04:05 UTC")
	}
	second := "waiting for the first snapshot"
	if in.Role != "" {
		second = fmt.Sprintf("role %s   overload ×%.2f   strict ×%.2f   %s   apps %d",
			in.Role, in.OverloadFactor, in.StrictFactor, clusterText(in.Cluster), s.Total)
	}
	third := v.Status
	if third == "" && v.Interval > 0 {
		third = fmt.Sprintf("every %v   q quit   j/k or ↓/↑ app   b by (%s)   w window (%s)", v.Interval, v.By, v.Window)
	}
	if third == "" {
		return []string{first, second}
	}
	return []string{first, second, third}
}

func clusterText(c *apps.ClusterState) string {
	if c == nil {
		return "cluster off"
	}
	t := fmt.Sprintf("cluster %d live", c.LiveInstances)
	switch {
	case !c.Reachable:
		t += ", Redis unreachable"
	case c.Degraded:
		t += ", degraded"
	}
	return t
}

// appsCols are the apps table's columns after the name.
const appsCols = "%9s %9s %14s %6s %8s %6s  %s"

func appsSection(s *Snapshot, sel string) section {
	nameW := 4
	for _, a := range s.Apps {
		nameW = max(nameW, Width(a.Name))
	}
	nameW = min(nameW, 24)
	sec := section{
		title: fmt.Sprintf("APPS (%d of %d, busiest first)", len(s.Apps), s.Total),
		cols:  "  " + pad("APP", nameW) + " " + fmt.Sprintf(appsCols, "REQ/S", "REFUSED/S", "INFLIGHT/LIMIT", "QUEUED", "BACKENDS", "IMBAL", "REFUSED BY"),
		keep:  -1,
	}
	for i, a := range s.Apps {
		mark := "  "
		if a.Name == sel {
			mark, sec.keep = "> ", i
		}
		imb := "-"
		if a.Imbalance > 0 {
			imb = fmt.Sprintf("%.2f", a.Imbalance)
			if a.ImbalanceAlert {
				imb += "!"
			}
		}
		sec.rows = append(sec.rows, mark+pad(a.Name, nameW)+" "+fmt.Sprintf(appsCols,
			rate(a.Requests), rate(sum(a.Rejected)),
			fmt.Sprintf("%d/%d", a.InFlight, a.ConcurrencyLimit), fmt.Sprint(a.Queued),
			fmt.Sprintf("%d/%d", a.BackendsHealthy, a.BackendsTotal), imb, reasons(a.Rejected)))
	}
	if len(sec.rows) == 0 {
		sec.rows = []string{"  no apps serve"}
	}
	return sec
}

func topSection(s *Snapshot, v View) section {
	sec := section{title: "TOP CLIENTS", cols: fmt.Sprintf("  %10s %6s %8s  %s", "COUNT", "SHARE", "±ERROR", "CLIENT"), keep: -1}
	if s.App == nil {
		return sec
	}
	bound := ""
	if s.Top != nil {
		bound = fmt.Sprintf(", error bound %d", s.Top.ErrorBound)
	}
	sec.title = fmt.Sprintf("TOP CLIENTS of %s by %s over %s%s", s.App.Name, v.By, v.Window, bound)
	var clients []topk.Share
	if s.Top != nil {
		clients = s.Top.Clients
	}
	for _, c := range clients {
		sec.rows = append(sec.rows, fmt.Sprintf("  %10d %5.1f%% %8d  %s", c.Count, 100*c.Share, c.Err, Sanitize(c.Client)))
	}
	if len(sec.rows) == 0 {
		if s.App.TopK == 0 {
			sec.rows = []string{"  not counted: limits.client.top_k is 0"}
		} else {
			sec.rows = []string{"  no clients in the window"}
		}
	}
	return sec
}

const backendCols = "%7s %8s %9s %9s %7s %9s"

func backendsSection(s *Snapshot) section {
	sec := section{title: "BACKENDS", keep: -1}
	addrW := 4
	if s.App != nil {
		for _, b := range s.App.Backends {
			addrW = max(addrW, Width(b.Addr))
		}
		addrW = min(addrW, 40)
		sec.title = fmt.Sprintf("BACKENDS of %s (%d of %d healthy; share and requests over 1m)", s.App.Name, s.App.BackendsHealthy, s.App.BackendsTotal)
		for _, b := range s.App.Backends {
			healthy := "yes"
			if !b.Healthy {
				healthy = "NO"
			}
			sec.rows = append(sec.rows, "  "+pad(b.Addr, addrW)+" "+fmt.Sprintf(backendCols,
				fmt.Sprintf("%.1f%%", 100*b.Share), healthy, fmt.Sprint(b.InFlight), latency(b.Latency), fmt.Sprint(b.Weight), fmt.Sprint(b.Requests)))
		}
	}
	sec.cols = "  " + pad("ADDR", addrW) + " " + fmt.Sprintf(backendCols, "SHARE", "HEALTHY", "INFLIGHT", "LATENCY", "WEIGHT", "REQUESTS")
	return sec
}

// rate formats a per-second rate in at most 7 columns.
func rate(r float64) string {
	switch {
	case r >= 1e7:
		return fmt.Sprintf("%.1fM", r/1e6)
	case r >= 1e5:
		return fmt.Sprintf("%.1fk", r/1e3)
	}
	return fmt.Sprintf("%.1f", r)
}

func latency(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d.Microseconds())
	case d < 10*time.Second:
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	}
	return d.Round(time.Second).String()
}

func sum(m map[string]float64) float64 {
	t := 0.0
	for _, v := range m {
		t += v
	}
	return t
}

// reasons lists refusals by reason, most first: "client-rate 31.2, rate 2.0".
func reasons(m map[string]float64) string {
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(a, b string) int {
		return cmp.Or(cmp.Compare(m[b], m[a]), strings.Compare(a, b))
	})
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		if m[k] > 0 {
			parts = append(parts, k+" "+rate(m[k]))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

package drill

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"
)

var slowClients = &Drill{
	Name: "slow-clients",
	Incident: "1,000 connections that sent their body slowly, or read the response slowly, held the " +
		"concurrency slots of one app with default limits: a second client's normal requests to it failed " +
		"297–299 of 550 with 503 queue-timeout, while nginx in front of the same backend served 550 of 550.",
	Applies: func(o Options) (bool, string) {
		if ok, why := need("--slow-host", o.SlowHost != ""); !ok {
			return false, why
		}
		if _, err := slowKinds(o.SlowKinds); err != nil {
			return false, err.Error()
		}
		return true, ""
	},
	run: runSlowClients,
}

// slowKindNames are the slow attack's kinds, as --slow-kinds names them.
func slowKindNames() []string { return []string{"slowloris", "slow-body", "slow-read"} }

// slowKinds reads the kinds named (nil or empty: all three) as a set.
func slowKinds(names []string) (map[string]bool, error) {
	set := map[string]bool{}
	if len(names) == 0 {
		names = slowKindNames()
	}
	for _, n := range names {
		if !slices.Contains(slowKindNames(), n) {
			return nil, fmt.Errorf("unknown slow attack kind %q (want %s)", n, strings.Join(slowKindNames(), ", "))
		}
		set[n] = true
	}
	return set, nil
}

// attack is the SlowAttack the options describe, against the edge.
func (o Options) attack() SlowAttack {
	kinds, _ := slowKinds(o.SlowKinds) // Applies has checked them
	n := func(k string) int {
		if kinds[k] {
			return o.SlowConns
		}
		return 0
	}
	sep := "?"
	if strings.Contains(o.Path, "?") {
		sep = "&"
	}
	return SlowAttack{
		Target: o.Target, Host: o.SlowHost, Path: o.Path,
		ReadPath:  o.Path + sep + "bytes=" + strconv.FormatInt(o.SlowReadSize, 10),
		Slowloris: n("slowloris"), SlowBody: n("slow-body"), SlowRead: n("slow-read"),
		Interval: o.SlowInterval, Chunk: o.SlowChunk, BodySizes: o.SlowBodySizes, BodyHead: o.SlowBodyHead,
		Redial: true, Clock: o.Clock, Sources: o.slowSources(),
	}
}

// slowSources are the attack's addresses: o.SlowSources, or by default
// three loopback addresses apart from the victim's (127.0.0.1) when the
// target is on loopback.
func (o Options) slowSources() []string {
	if o.SlowSources != nil {
		return o.SlowSources
	}
	addr, err := dialAddr(o.Target)
	if err != nil {
		return nil
	}
	host, _, _ := net.SplitHostPort(addr)
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() || ip.To4() == nil {
		return nil
	}
	return []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"}
}

// runSlowClients starts the drill's backend, waits for the edge to route to
// it, measures the victim alone for half of Duration, then opens every
// attack connection at once and measures the victim again for Duration
// while the attack holds them.
func runSlowClients(ctx context.Context, o Options, r *Report) error {
	a := o.attack()
	// the attack's connections, the backend's ends of those the edge passes
	// on, and the victim's at both ends
	if err := EnsureFiles(a.Files() + a.SlowBody + a.SlowRead + 2*o.MaxInFlight); err != nil {
		return err
	}
	b, err := startBackend("slow", o.SlowPort, nil, nil)
	if err != nil {
		return fmt.Errorf("drill: backend: %w", err)
	}
	bs := []*Backend{b}
	defer CloseBackends(bs)
	lead := fmt.Sprintf("slow-clients: a backend listens on %s (GET ?bytes=N answers N bytes); point the edge at it "+
		"with the limits you serve with (levee: an app's default limits)", b.Addr)
	if err := pointEdge(ctx, o, lead, o.SlowHost, appSnippet("slow", o.SlowHost, bs), bs); err != nil {
		return err
	}
	victim := get(o.SlowHost, o.Path, o.Clients)
	base := stream(ctx, o, "victim, before", constant(o.VictimRate, max(o.Duration/2, 100*time.Millisecond), o.MaxRequests), 0, victim)
	run, err := a.Start(ctx)
	if err != nil {
		return err
	}
	under := stream(ctx, o, "victim, under attack", constant(o.VictimRate, o.Duration, o.MaxRequests), 0, victim)
	st := run.Stop()
	var opened, refused, cut int64
	for _, k := range st.Kinds() {
		opened, refused, cut = opened+k.Opened, refused+k.Refused, cut+k.Cut
		if k.Conns > 0 {
			r.Notes = append(r.Notes, slowNote(k, a))
		}
	}
	if opened == 0 {
		return fmt.Errorf("no attack connection could be opened (%d dials failed): is %s the edge?", refused, o.Target)
	}
	r.add(base, under)
	r.Checks = gradeSlow(base, under, o)
	r.ratio("victim success", under.SuccessRatio())
	r.ratio("victim p99 during/before", p99Ratio(base, under))
	r.ratio("attack connections cut", float64(cut)/float64(opened))
	return nil
}

// gradeSlow: the victim keeps MinSuccess of its requests and its p99 under
// the attack.
func gradeSlow(base, under *Result, o Options) []Check {
	return []Check{
		successCheck("victim's success under attack", under, o.MinSuccess),
		p99Check("victim's latency under attack", base, under, o.P99Factor, o.P99Slack),
	}
}

// slowNote says what one kind of attack connection went through.
func slowNote(k SlowKindStats, a SlowAttack) string {
	a = a.withDefaults()
	var what string
	switch k.Kind {
	case "slowloris":
		what = fmt.Sprintf("a header line every %v", a.Interval)
	case "slow-body":
		sizes := make([]string, len(a.BodySizes))
		for i, s := range a.BodySizes {
			sizes[i] = strconv.FormatInt(s, 10)
		}
		what = fmt.Sprintf("bodies of %s bytes, the first %d of a larger one at once, then %d bytes every %v",
			strings.Join(sizes, ", "), max(a.BodyHead, 0), a.Chunk, a.Interval)
	default:
		what = fmt.Sprintf("%s read %d bytes every %v through a %d-byte receive buffer", a.ReadPath, a.Chunk, a.Interval, a.ReadBuffer)
	}
	s := fmt.Sprintf("%s, %d connections (%s): %d opened, %d refused, %d cut by the edge", k.Kind, k.Conns, what, k.Opened, k.Refused, k.Cut)
	if k.Cut > 0 {
		s += fmt.Sprintf(" after %v to %v (p50 %v)", k.CutMin.Round(time.Millisecond), k.CutMax.Round(time.Millisecond), k.CutP50.Round(time.Millisecond))
	}
	s += fmt.Sprintf(", %d requests completed, %d held to the end", k.Completed, k.Open)
	if len(k.Statuses) > 0 {
		m := make(map[string]int64, len(k.Statuses))
		for c, n := range k.Statuses {
			m[strconv.Itoa(c)] = n
		}
		s += "; the edge answered " + codes(m)
	}
	return s
}

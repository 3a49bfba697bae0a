package observe

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/leveeproxy/levee/internal/clock"
	"github.com/prometheus/client_golang/prometheus"
)

// The events of the request path, each limited per app. A name is the
// line's message.
const (
	EventBackendUnreachable = "backend unreachable"
	EventBackendTimeout     = "backend timeout"
	EventClientTooSlow      = "client too slow"
	EventCatalogLoad        = "catalog load failed"
	EventRefused            = "refused"
	// EventBackendUnclean: a backend connection closed after an exchange
	// that did not end cleanly (bytes left on it); its app is "".
	EventBackendUnclean = "backend connection unclean"
)

// OtherApps is the app of a key merged because MaxLogKeys keys were live.
const OtherApps = "*"

// MaxLogKeys bounds the (event, app) keys an ErrorLog tracks at once; a
// line of a new app beyond it counts under (event, OtherApps), so a million
// failing apps cost a bounded map, not a million entries.
const MaxLogKeys = 1024

// ErrorLimits are an ErrorLog's budgets.
type ErrorLimits struct {
	// PerSecond caps the lines of all keys together, summaries included
	// (but for one merged summary per second when they would not fit).
	PerSecond int
	// PerEvent caps the lines of one (event, app) key per Interval.
	PerEvent int
	Interval time.Duration
}

// ErrorLog writes request-path errors at a bounded rate per (event, app)
// and in all. A line over a budget is dropped and counted; when a key's
// interval ends with lines dropped, one "suppressed N similar" line says
// how many. One failing backend under load thus costs a few lines per
// interval, never one per request. Safe for concurrent use.
type ErrorLog struct {
	log        *slog.Logger
	clk        clock.Clock
	suppressed prometheus.Counter // lines dropped; may be nil
	summaries  prometheus.Counter // summary lines written; may be nil

	mu      sync.Mutex
	limits  ErrorLimits
	window  time.Time // start of the current one-second window (PerSecond)
	written int       // lines written in the window
	keys    map[logKey]logKeyState
	swept   time.Time
	// merged gathers summaries that found no room under PerSecond; the next
	// sweep writes them as one line.
	merged mergedSummary
}

type logKey struct{ event, app string }

type logKeyState struct {
	start      time.Time // the key's interval began
	level      slog.Level
	written    int
	suppressed int
}

type mergedSummary struct {
	lines, keys int
	level       slog.Level // the most severe of the keys'
}

// summary is a "suppressed N similar" line to write once the lock is released.
type summary struct {
	key   logKey
	level slog.Level
	n     int
	keys  int // > 0 for the merged summary of that many keys
}

// NewErrorLog returns an ErrorLog writing to l. The counters, if not nil,
// count dropped lines and summaries written.
func NewErrorLog(l *slog.Logger, lim ErrorLimits, clk clock.Clock, suppressed, summaries prometheus.Counter) *ErrorLog {
	if clk == nil {
		clk = clock.Real{}
	}
	e := &ErrorLog{log: l, clk: clk, suppressed: suppressed, summaries: summaries, keys: map[logKey]logKeyState{}}
	e.limits = lim.sane()
	return e
}

func (lim ErrorLimits) sane() ErrorLimits {
	lim.PerSecond, lim.PerEvent = max(lim.PerSecond, 1), max(lim.PerEvent, 1)
	lim.Interval = max(lim.Interval, time.Second)
	return lim
}

// ErrorLog returns a rate-limited error log over m's counters of dropped
// lines and summaries. Call it once per Metrics: it registers the latter.
func (m *Metrics) ErrorLog(l *slog.Logger, lim ErrorLimits) *ErrorLog {
	summaries := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "levee_log_summaries_total", Help: `"suppressed N similar" lines written for lines the error log rate limits dropped.`,
	})
	m.Registry.MustRegister(summaries)
	return NewErrorLog(l, lim, nil, m.logsSuppressed, summaries)
}

// SetLimits changes the budgets (on config reload); keys keep their intervals.
func (e *ErrorLog) SetLimits(lim ErrorLimits) {
	e.mu.Lock()
	e.limits = lim.sane()
	e.mu.Unlock()
}

// Line is the right to write one line, from Take.
type Line struct {
	e     *ErrorLog
	level slog.Level
	event string
	app   string
}

// Log writes the line: the event as its message, the app (if any), args.
func (l Line) Log(args ...any) {
	all := make([]any, 0, len(args)+2)
	if l.app != "" {
		all = append(all, "app", l.app)
	}
	l.e.log.Log(context.Background(), l.level, l.event, append(all, args...)...)
}

// Take reports whether a line of event for app at level may be written
// now; if so the caller writes it with the Line. A level the logger does
// not log takes nothing. Take allocates nothing on refusal (a new key may
// grow the map), so callers build the line's arguments only once allowed.
func (e *ErrorLog) Take(level slog.Level, event, app string) (Line, bool) {
	if !e.log.Enabled(context.Background(), level) {
		return Line{}, false
	}
	now := e.clk.Now()
	var out []summary
	e.mu.Lock()
	if now.Sub(e.swept) >= time.Second {
		out = e.sweepLocked(now, false, out)
	}
	k := logKey{event, app}
	st, ok := e.keys[k]
	if !ok && len(e.keys) >= MaxLogKeys {
		k.app = OtherApps
		st, ok = e.keys[k]
	}
	switch {
	case !ok:
		st = logKeyState{start: now, level: level}
	case now.Sub(st.start) >= e.limits.Interval:
		out = e.endLocked(k, st, now, out)
		st = logKeyState{start: now, level: level}
	}
	allowed := st.written < e.limits.PerEvent && e.globalLocked(now)
	if allowed {
		st.written++
	} else {
		st.suppressed++
		if e.suppressed != nil {
			e.suppressed.Inc()
		}
	}
	st.level = max(st.level, level)
	e.keys[k] = st
	e.mu.Unlock()
	e.write(out)
	return Line{e: e, level: level, event: event, app: k.app}, allowed
}

// Error logs event for app with args at error level, if the budgets allow.
// The arguments are built whether or not the line is written: on a path
// that may fail per request, use Take.
func (e *ErrorLog) Error(event, app string, args ...any) {
	if l, ok := e.Take(slog.LevelError, event, app); ok {
		l.Log(args...)
	}
}

// globalLocked takes one line of the PerSecond budget.
func (e *ErrorLog) globalLocked(now time.Time) bool {
	if now.Sub(e.window) >= time.Second {
		e.window, e.written = now, 0
	}
	if e.written >= e.limits.PerSecond {
		return false
	}
	e.written++
	return true
}

// endLocked ends k's interval: its summary if it dropped lines, within
// PerSecond, or else merged into the next sweep's one line.
func (e *ErrorLog) endLocked(k logKey, st logKeyState, now time.Time, out []summary) []summary {
	if st.suppressed == 0 {
		return out
	}
	if e.globalLocked(now) {
		return append(out, summary{key: k, level: st.level, n: st.suppressed})
	}
	if e.merged.keys == 0 || st.level > e.merged.level {
		e.merged.level = st.level
	}
	e.merged.lines += st.suppressed
	e.merged.keys++
	return out
}

// sweepLocked ends every key whose interval is over (every key with all),
// forgetting it, and the merged summary.
func (e *ErrorLog) sweepLocked(now time.Time, all bool, out []summary) []summary {
	e.swept = now
	for k, st := range e.keys {
		if all || now.Sub(st.start) >= e.limits.Interval {
			out = e.endLocked(k, st, now, out)
			delete(e.keys, k)
		}
	}
	if e.merged.lines > 0 {
		out = append(out, summary{level: e.merged.level, n: e.merged.lines, keys: e.merged.keys})
		e.merged = mergedSummary{}
	}
	return out
}

// Sweep writes the summaries of the keys whose interval has ended and
// forgets them. The request path sweeps at most once a second as it logs;
// Sweep is for the owner's ticker, so a key that went quiet is summed up.
func (e *ErrorLog) Sweep() { e.sweep(false) }

// Flush ends every key's interval now, writing what it suppressed (at
// shutdown, so no count is lost).
func (e *ErrorLog) Flush() { e.sweep(true) }

func (e *ErrorLog) sweep(all bool) {
	now := e.clk.Now()
	e.mu.Lock()
	out := e.sweepLocked(now, all, nil)
	e.mu.Unlock()
	e.write(out)
}

// write writes summaries, outside the lock.
func (e *ErrorLog) write(out []summary) {
	if len(out) == 0 {
		return
	}
	e.mu.Lock()
	interval := e.limits.Interval
	e.mu.Unlock()
	for _, s := range out {
		msg := fmt.Sprintf("suppressed %d similar", s.n)
		if s.keys > 0 {
			e.log.Log(context.Background(), s.level, msg, "event", "*", "app", OtherApps, "count", s.n,
				"keys", s.keys, "interval", interval)
		} else {
			e.log.Log(context.Background(), s.level, msg, "event", s.key.event, "app", s.key.app, "count", s.n,
				"interval", interval)
		}
		if e.summaries != nil {
			e.summaries.Inc()
		}
	}
}

// StdLogger returns a *log.Logger (for http.Server.ErrorLog) whose lines go
// through this rate limit, tagged with source.
func (e *ErrorLog) StdLogger(source string) *log.Logger {
	return log.New(stdWriter{e: e, source: source}, "", 0)
}

type stdWriter struct {
	e      *ErrorLog
	source string
}

func (w stdWriter) Write(p []byte) (int, error) {
	l, ok := w.e.Take(slog.LevelError, w.source, "")
	if !ok {
		return len(p), nil
	}
	msg := strings.TrimSpace(string(p))
	if len(msg) > maxStdLine {
		// An engine's line may echo what a client sent (a header it could
		// not parse): the log keeps its start, not an attacker's 64 KiB.
		msg = strings.ToValidUTF8(msg[:maxStdLine], "") + "..."
	}
	l.e.log.Error(msg, "source", w.source)
	return len(p), nil
}

// maxStdLine caps a line an engine logs.
const maxStdLine = 512

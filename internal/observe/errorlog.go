package observe

import (
	"log"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/leveeproxy/levee/internal/clock"
	"github.com/prometheus/client_golang/prometheus"
)

// ErrorLog writes request-path errors at no more than PerSecond lines per
// second. Lines over the budget are dropped and counted; the next line that
// gets through says how many were dropped. One failing backend under load
// thus costs a few lines a second, never one per request.
// Safe for concurrent use.
type ErrorLog struct {
	log        *slog.Logger
	clk        clock.Clock
	suppressed prometheus.Counter // may be nil

	mu        sync.Mutex
	perSecond int
	window    time.Time // start of the current one-second window
	written   int       // lines written in the window
	dropped   int       // lines dropped since the last written line
}

// NewErrorLog returns an ErrorLog writing to l. suppressed, if not nil,
// counts dropped lines.
func NewErrorLog(l *slog.Logger, perSecond int, clk clock.Clock, suppressed prometheus.Counter) *ErrorLog {
	if clk == nil {
		clk = clock.Real{}
	}
	return &ErrorLog{log: l, clk: clk, perSecond: max(perSecond, 1), suppressed: suppressed}
}

// ErrorLog returns a rate-limited error log over m's suppression counter.
func (m *Metrics) ErrorLog(l *slog.Logger, perSecond int) *ErrorLog {
	return NewErrorLog(l, perSecond, nil, m.logsSuppressed)
}

// SetPerSecond changes the budget (on config reload).
func (e *ErrorLog) SetPerSecond(n int) {
	e.mu.Lock()
	e.perSecond = max(n, 1)
	e.mu.Unlock()
}

// Error logs msg with args at error level, if the budget allows.
func (e *ErrorLog) Error(msg string, args ...any) {
	dropped, ok := e.take()
	if !ok {
		return
	}
	if dropped > 0 {
		args = append(args, "suppressed_before", dropped)
	}
	e.log.Error(msg, args...)
}

// take reports whether a line may be written now, and how many were
// dropped since the last one that was.
func (e *ErrorLog) take() (dropped int, ok bool) {
	now := e.clk.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	if now.Sub(e.window) >= time.Second {
		e.window, e.written = now, 0
	}
	if e.written >= e.perSecond {
		e.dropped++
		if e.suppressed != nil {
			e.suppressed.Inc()
		}
		return 0, false
	}
	e.written++
	dropped, e.dropped = e.dropped, 0
	return dropped, true
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
	msg := strings.TrimSpace(string(p))
	if len(msg) > maxStdLine {
		// An engine's line may echo what a client sent (a header it could
		// not parse): the log keeps its start, not an attacker's 64 KiB.
		msg = strings.ToValidUTF8(msg[:maxStdLine], "") + "..."
	}
	w.e.Error(msg, "source", w.source)
	return len(p), nil
}

// maxStdLine caps a line an engine logs.
const maxStdLine = 512

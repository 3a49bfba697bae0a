package forward

import (
	"log/slog"

	"github.com/leveeproxy/levee/internal/observe"
)

// logBackendFailed logs an exchange with backend addr that failed (timed
// out, or else unreachable), within the error log's per-app budget; the
// line's arguments are built only when it is written.
func (p *Pool) logBackendFailed(timeout bool, addr string, err error) {
	event := observe.EventBackendUnreachable
	if timeout {
		event = observe.EventBackendTimeout
	}
	if l, ok := p.errlog.Take(slog.LevelError, event, p.app); ok {
		l.Log("backend", addr, "err", err)
	}
}

// logTooSlow logs a client cut off at server.min_rate: a refusal, so at
// info level, within the per-app budget. sent is the response bytes sent
// (-1 while the request body was read); remote may be "".
func (p *Pool) logTooSlow(direction string, sent int64, remote string, err error) {
	l, ok := p.errlog.Take(slog.LevelInfo, observe.EventClientTooSlow, p.app)
	if !ok {
		return
	}
	args := []any{"direction", direction}
	if sent >= 0 {
		args = append(args, "sent", sent)
	}
	if remote != "" {
		args = append(args, "remote", remote)
	}
	if err != nil {
		args = append(args, "err", err)
	}
	l.Log(args...)
}

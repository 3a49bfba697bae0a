package observe

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/clock"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestErrorLogIsRateLimited(t *testing.T) {
	var buf bytes.Buffer
	clk := clock.NewFake(time.Unix(1000, 0))
	dropped := prometheus.NewCounter(prometheus.CounterOpts{Name: "x"})
	el := NewErrorLog(slog.New(slog.NewTextHandler(&buf, nil)), 3, clk, dropped)

	for range 1000 {
		el.Error("backend down", "backend", "b1")
	}
	if got := strings.Count(buf.String(), "\n"); got != 3 {
		t.Fatalf("wrote %d lines in one second; want 3 (the budget)", got)
	}
	if got := testutil.ToFloat64(dropped); got != 997 {
		t.Fatalf("suppressed counter = %v; want 997", got)
	}
	clk.Advance(999 * time.Millisecond)
	el.Error("still in window")
	if strings.Contains(buf.String(), "still in window") {
		t.Fatal("a line got through before the window ended")
	}
	clk.Advance(time.Millisecond)
	el.Error("next window")
	last := buf.String()[strings.LastIndex(strings.TrimSuffix(buf.String(), "\n"), "\n")+1:]
	if !strings.Contains(last, "next window") || !strings.Contains(last, "suppressed_before=998") {
		t.Fatalf("first line of the next window = %q; want it to report 998 suppressed", last)
	}
}

func TestStdLoggerGoesThroughTheLimit(t *testing.T) {
	var buf bytes.Buffer
	clk := clock.NewFake(time.Unix(1000, 0))
	el := NewErrorLog(slog.New(slog.NewTextHandler(&buf, nil)), 1, clk, nil)
	l := el.StdLogger("http")
	for range 10 {
		l.Printf("http: TLS handshake error from 1.2.3.4")
	}
	if got := strings.Count(buf.String(), "\n"); got != 1 {
		t.Fatalf("wrote %d lines; want 1", got)
	}
	if !strings.Contains(buf.String(), "source=http") {
		t.Fatalf("line lacks its source: %q", buf.String())
	}
}

package acme

import (
	"context"
	"crypto/tls"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/leveeproxy/levee/internal/clock"
	"github.com/leveeproxy/levee/internal/config"
)

func unstarted(t *testing.T, clk clock.Clock, concurrency int) *Manager {
	cfg := config.Default()
	cfg.TLS.ACME.CA = "https://ca.invalid/dir"
	cfg.TLS.ACME.Concurrency = concurrency
	m := New(Options{Config: &cfg, Clock: clk})
	t.Cleanup(m.Close)
	return m
}

// Issuance concurrency: with every token taken, a name that would start
// one more issuance is refused at once (counted busy); a name whose
// issuance is under way is joined without a token.
func TestStartBoundedByConcurrency(t *testing.T) {
	m := unstarted(t, nil, 2)
	m.sem <- struct{}{}
	m.sem <- struct{}{} // both tokens held, as by two issuances
	if f := m.start("c.example.com"); f != nil {
		t.Fatal("a third issuance started with 2 tokens held")
	}
	if got := testutil.ToFloat64(m.m.refused.WithLabelValues(ReasonBusy)); got != 1 {
		t.Fatalf("refused{busy} = %v", got)
	}
	running := &flight{done: make(chan struct{})}
	m.flying["a.example.com"] = running
	if f := m.start("a.example.com"); f != running {
		t.Fatal("a handshake for a name being issued did not join its issuance")
	}
	if got := testutil.ToFloat64(m.m.refused.WithLabelValues(ReasonBusy)); got != 1 {
		t.Fatalf("joining was counted busy: %v", got)
	}
}

// A first handshake waits for its name's issuance at most first_wait
// (5s by default), on the injected clock: not at 5s less a nanosecond,
// at 5s.
func TestAwaitAtMostFirstWait(t *testing.T) {
	clk := clock.NewFake(time.Unix(1e9, 0))
	m := unstarted(t, clk, 1)
	running := &flight{done: make(chan struct{})}
	m.flying["a.example.com"] = running
	got := make(chan *tls.Certificate, 1)
	go func() { got <- m.await(context.Background(), "a.example.com") }()
	<-clk.TimerCreated()
	clk.Advance(config.DefaultACMEFirstWait - time.Nanosecond)
	select {
	case <-got:
		t.Fatal("await returned before first_wait, with the issuance still running")
	default: // the timer has not fired: nothing else can end the wait
	}
	clk.Advance(time.Nanosecond)
	if c := <-got; c != nil {
		t.Fatalf("await after first_wait = %v, want none (the listener's)", c)
	}

	// An issuance that ends within first_wait hands its certificate over.
	done := &flight{done: make(chan struct{}), cert: &tls.Certificate{}}
	m.flying["b.example.com"] = done
	go func() { got <- m.await(context.Background(), "b.example.com") }()
	<-clk.TimerCreated()
	close(done.done)
	if c := <-got; c != done.cert {
		t.Fatalf("await = %v, want the issued certificate", c)
	}
}

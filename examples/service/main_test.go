package main

import (
	"context"
	"testing"
	"time"
)

// TestBoundedByTheBudget runs both modes small: unbounded, the calls in
// flight go far past the budget; bounded, never past it, and the goroutines
// stay within the budget of the baseline (server and client goroutines
// for the connections come and go beside the tasks).
func TestBoundedByTheBudget(t *testing.T) {
	c := config{requests: 3, items: 2000, small: 5, budget: 16, latency: time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	un, err := measure(ctx, c, "unbounded")
	if err != nil {
		t.Fatal(err)
	}
	if un.peakCalls <= int64(c.budget) {
		t.Errorf("unbounded: peak calls %d, want the outage's shape (> %d)", un.peakCalls, c.budget)
	}
	b, err := measure(ctx, c, "bounded")
	if err != nil {
		t.Fatal(err)
	}
	if b.peakCalls > int64(c.budget) {
		t.Errorf("bounded: peak calls %d, want ≤ %d", b.peakCalls, c.budget)
	}
	// Beside the tasks: a caller per request stream (4) and, per connection
	// (4), the server's goroutine and the client transport's two, with slack.
	const connGoroutines = 4 + 4*3 + 16
	if b.peakGoroutines > int64(b.baseGoroutines+c.budget+connGoroutines) {
		t.Errorf("bounded: peak goroutines %d, want ≤ %d + %d + %d", b.peakGoroutines, b.baseGoroutines, c.budget, connGoroutines)
	}
}

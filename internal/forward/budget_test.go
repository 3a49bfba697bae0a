package forward

import (
	"testing"
	"time"
)

func TestBudgetMinimumAndRatio(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := NewBudget(20, minRetries)
	// No requests yet: only the minimum.
	for i := range minRetries {
		if !b.Retry(t0) {
			t.Fatalf("retry %d refused within the minimum", i+1)
		}
	}
	if b.Retry(t0) {
		t.Fatal("retry beyond the minimum allowed with no requests")
	}
	// Each 5 requests earn one more retry (20%).
	for i := range 10 {
		b.Request(t0)
		want := (i+1)%5 == 0
		if got := b.Retry(t0); got != want {
			t.Fatalf("after %d requests: Retry = %v, want %v", i+1, got, want)
		}
	}
}

func TestBudgetWindowSlides(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := NewBudget(50, minRetries)
	for range 10 {
		b.Request(t0)
	}
	n := 0
	for b.Retry(t0) {
		n++
	}
	if want := 5 + minRetries; n != want {
		t.Fatalf("%d retries from 10 requests at 50%%, want %d", n, want)
	}
	// 9.5s later both are still in the window.
	if b.Retry(t0.Add(9500 * time.Millisecond)) {
		t.Fatal("retry allowed while the window is spent")
	}
	// 10s later the first second's requests and retries have left it.
	later := t0.Add(BudgetBuckets * BudgetBucket)
	n = 0
	for b.Retry(later) {
		n++
	}
	if n != minRetries {
		t.Fatalf("%d retries after the window slid, want the minimum %d", n, minRetries)
	}
}

func TestBudgetZeroRetriesNothing(t *testing.T) {
	b := NewBudget(0, minRetries)
	b.Request(time.Unix(1, 0))
	if b.Retry(time.Unix(1, 0)) {
		t.Fatal("0% budget allowed a retry")
	}
}

// minRetries is the retry.min_per_window these tests configure.
const minRetries = 3

func TestBudgetWithoutMinimumIsStrict(t *testing.T) {
	b := NewBudget(20, 0)
	now := time.Unix(100, 0)
	if b.Retry(now) {
		t.Fatal("a retry allowed before any request, with no minimum")
	}
	allowed := 0
	for range 50 {
		b.Request(now)
		if b.Retry(now) {
			allowed++
		}
	}
	if allowed != 10 { // exactly 20% of 50
		t.Fatalf("%d retries for 50 requests at 20%%; want exactly 10", allowed)
	}
}

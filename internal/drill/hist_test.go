package drill

import (
	"testing"
	"time"
)

func TestBucketRoundTrip(t *testing.T) {
	// Every value lies inside the bounds of its bucket, buckets are
	// contiguous and in order, and their width is within 1/64 of the value.
	prevHi := int64(-1)
	for i := 0; i < histBuckets; i++ {
		lo, hi := bucketBounds(i)
		if lo != prevHi+1 {
			t.Fatalf("bucket %d starts at %d, previous ended at %d", i, lo, prevHi)
		}
		if hi < lo {
			t.Fatalf("bucket %d: hi %d < lo %d", i, hi, lo)
		}
		if got := bucketOf(lo); got != i {
			t.Fatalf("bucketOf(%d) = %d, want %d", lo, got, i)
		}
		if got := bucketOf(hi); got != i {
			t.Fatalf("bucketOf(%d) = %d, want %d", hi, got, i)
		}
		if lo >= histLinear && float64(hi-lo+1)/float64(lo) > 1.0/64+1e-12 {
			t.Fatalf("bucket %d [%d,%d] wider than 1/64 of its value", i, lo, hi)
		}
		prevHi = hi
	}
	if prevHi != histMax {
		t.Fatalf("last bucket ends at %d, want %d", prevHi, histMax)
	}
	if bucketOf(-5) != 0 || bucketOf(histMax*4) != histBuckets-1 {
		t.Fatal("out-of-range values are not clamped")
	}
}

func TestQuantiles(t *testing.T) {
	var h Histogram
	if h.Quantile(0.5) != 0 || h.Count() != 0 {
		t.Fatal("empty histogram")
	}
	// 1..10000 µs, uniformly.
	for v := 1; v <= 10000; v++ {
		h.Record(time.Duration(v) * time.Microsecond)
	}
	if h.Count() != 10000 || h.Max() != 10*time.Millisecond {
		t.Fatalf("count %d max %v", h.Count(), h.Max())
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 5 * time.Millisecond}, {0.9, 9 * time.Millisecond}, {0.99, 9900 * time.Microsecond}, {1, 10 * time.Millisecond}} {
		got := h.Quantile(c.q)
		// upper bound of the bucket: never below the true value, at most 1/64 above
		if got < c.want || float64(got-c.want) > float64(c.want)/64 {
			t.Errorf("q%.2f = %v, want %v (+1/64)", c.q, got, c.want)
		}
	}
	if got := h.Quantile(1); got != h.Max() {
		t.Errorf("q1 = %v, want max %v", got, h.Max())
	}
}

func TestQuantileSmallAndSkewed(t *testing.T) {
	var h Histogram
	for range 99 {
		h.Record(100 * time.Nanosecond) // exact bucket
	}
	h.Record(2 * time.Second)
	if got := h.Quantile(0.5); got != 100 {
		t.Errorf("p50 = %v, want 100ns", got)
	}
	if got := h.Quantile(0.99); got != 100 {
		t.Errorf("p99 = %v, want 100ns (99 of 100 samples)", got)
	}
	if got := h.Quantile(0.999); got != 2*time.Second {
		t.Errorf("p99.9 = %v, want 2s (clamped to max)", got)
	}
	s := h.Summary()
	if s.Count != 100 || s.Max != 2000 || s.P50 != 0 {
		t.Errorf("summary %+v", s)
	}
}

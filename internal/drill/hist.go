package drill

import (
	"math"
	"math/bits"
	"sync/atomic"
	"time"
)

// Histogram is a fixed-size, log-bucketed latency histogram in the spirit of
// HdrHistogram: values (nanoseconds) below 128 get one bucket each; above that
// every power-of-two range is split into 64 equal buckets, so any recorded
// value is reported within 1/64 (~1.6%) of its true value. Values above
// histMax are clamped. Memory is fixed (histBuckets counters), whatever the
// number of samples, and Record is safe for concurrent use (atomic adds).
type Histogram struct {
	counts [histBuckets]atomic.Uint64
	n      atomic.Uint64
	max    atomic.Int64
}

const (
	histSubBits = 6                // 64 sub-buckets per power of two
	histSub     = 1 << histSubBits // 64
	histLinear  = 2 * histSub      // values 0..127 are exact
	histMaxBits = 42               // clamp at 2^42 ns (~73 min)
	histBuckets = histLinear + (histMaxBits-histSubBits-1)*histSub
	histMax     = int64(1)<<histMaxBits - 1
)

// bucketOf maps a non-negative value to its bucket index.
func bucketOf(v int64) int {
	if v < 0 {
		v = 0
	}
	if v > histMax {
		v = histMax
	}
	if v < histLinear {
		return int(v)
	}
	shift := bits.Len64(uint64(v)) - (histSubBits + 1) // >= 1
	return histLinear + (shift-1)*histSub + int(v>>shift) - histSub
}

// bucketBounds returns the smallest and largest value that map to bucket i.
func bucketBounds(i int) (lo, hi int64) {
	if i < histLinear {
		return int64(i), int64(i)
	}
	shift := (i-histLinear)/histSub + 1
	mant := int64((i-histLinear)%histSub + histSub)
	lo = mant << shift
	return lo, lo + int64(1)<<shift - 1
}

// Record adds one value.
func (h *Histogram) Record(d time.Duration) {
	v := int64(d)
	h.counts[bucketOf(v)].Add(1)
	h.n.Add(1)
	for {
		m := h.max.Load()
		if v <= m || h.max.CompareAndSwap(m, v) {
			return
		}
	}
}

// Count is the number of recorded values.
func (h *Histogram) Count() uint64 { return h.n.Load() }

// Max is the largest recorded value (exact, not bucketed).
func (h *Histogram) Max() time.Duration { return time.Duration(h.max.Load()) }

// Quantile returns the value at quantile q (0 < q <= 1): the upper bound of
// the bucket holding the ceil(q*n)-th smallest value, never above Max. With no
// values it returns 0.
func (h *Histogram) Quantile(q float64) time.Duration {
	n := h.n.Load()
	if n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(n)))
	if rank < 1 {
		rank = 1
	}
	if rank > n {
		rank = n
	}
	var seen uint64
	for i := range h.counts {
		seen += h.counts[i].Load()
		if seen >= rank {
			_, hi := bucketBounds(i)
			if m := h.max.Load(); hi > m {
				hi = m
			}
			return time.Duration(hi)
		}
	}
	return h.Max()
}

// LatencySummary is the JSON form of a histogram, in milliseconds.
type LatencySummary struct {
	Count uint64  `json:"count"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P99   float64 `json:"p99_ms"`
	Max   float64 `json:"max_ms"`
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 } // ms, µs precision

// Summary returns count, p50, p90, p99 and max.
func (h *Histogram) Summary() LatencySummary {
	return LatencySummary{
		Count: h.Count(),
		P50:   ms(h.Quantile(0.50)),
		P90:   ms(h.Quantile(0.90)),
		P99:   ms(h.Quantile(0.99)),
		Max:   ms(h.Max()),
	}
}

package overload

import "testing"

// BenchmarkHostSample is the cost of one reading of the real host, paid
// once per overload.interval by one goroutine.
func BenchmarkHostSample(b *testing.B) {
	h := NewSystemHost()
	b.ReportAllocs()
	for b.Loop() {
		h.Sample()
	}
}

// BenchmarkObserve is the monitor's arithmetic per interval.
func BenchmarkObserve(b *testing.B) {
	m, c, s := NewMonitor(), testConfig(), cool()
	b.ReportAllocs()
	for b.Loop() {
		m.Observe(c, s)
	}
}

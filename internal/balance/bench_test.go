package balance

import (
	"fmt"
	"testing"
	"time"
)

func BenchmarkP2CPickDone(b *testing.B) {
	for _, n := range []int{10, 50} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			now := time.Unix(0, 0)
			p := NewP2C(NewSet(specs(names("10.0.0.", n)...), nil, now), nil)
			b.ReportAllocs()
			for b.Loop() {
				p.Done(p.Pick("", now), OK, time.Millisecond, now)
			}
		})
	}
}

func BenchmarkP2CPickDoneParallel(b *testing.B) {
	now := time.Unix(0, 0)
	p := NewP2C(NewSet(specs(names("10.0.0.", 10)...), nil, now), nil)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			p.Done(p.Pick("", now), OK, time.Millisecond, now)
		}
	})
}

func BenchmarkHashPickDone(b *testing.B) {
	for _, n := range []int{10, 50} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			now := time.Unix(0, 0)
			h, _ := NewHash(NewSet(specs(names("10.0.0.", n)...), nil, now), 0)
			keys := hashKeys(1024)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				h.Done(h.Pick(keys[i&1023], now), OK, time.Millisecond, now)
				i++
			}
		})
	}
}

func BenchmarkHashPickDoneParallel(b *testing.B) {
	now := time.Unix(0, 0)
	h, _ := NewHash(NewSet(specs(names("10.0.0.", 10)...), nil, now), 0)
	keys := hashKeys(1024)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			h.Done(h.Pick(keys[i&1023], now), OK, time.Millisecond, now)
			i++
		}
	})
}

func BenchmarkRoundRobinSetPickDone(b *testing.B) {
	now := time.Unix(0, 0)
	q := NewRoundRobinSet(NewSet(specs(names("10.0.0.", 10)...), nil, now))
	b.ReportAllocs()
	for b.Loop() {
		q.Done(q.Pick("", now), OK, time.Millisecond, now)
	}
}

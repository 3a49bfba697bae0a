package clock

import "time"

// Every calls fn every interval on clk until done is closed: the loop of
// an owner's periodic work (a sweep, a watch). It returns once done is
// closed, never in the middle of fn.
func Every(clk Clock, done <-chan struct{}, interval time.Duration, fn func()) {
	EveryOf(clk, done, func() time.Duration { return interval }, fn)
}

// EveryOf is Every with the interval read afresh before each wait (a
// setting a reload may change).
func EveryOf(clk Clock, done <-chan struct{}, interval func() time.Duration, fn func()) {
	t := clk.NewTimer(interval())
	defer func() { t.Stop() }() // the timer current at exit
	for {
		select {
		case <-done:
			return
		case <-t.C():
			fn()
			t = clk.NewTimer(interval())
		}
	}
}

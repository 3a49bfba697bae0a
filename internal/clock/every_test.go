package clock

import (
	"testing"
	"time"
)

// Every calls fn once per interval of the clock's time, reads the
// interval afresh each time (EveryOf), and returns once done is closed.
func TestEvery(t *testing.T) {
	f := NewFake(epoch)
	done, ended := make(chan struct{}), make(chan struct{})
	calls := make(chan struct{}, 10)
	interval := time.Second
	go func() {
		defer close(ended)
		EveryOf(f, done, func() time.Duration { return interval }, func() {
			interval = 2 * time.Second // read by the loop's goroutine only
			calls <- struct{}{}
		})
	}()
	<-f.TimerCreated()
	f.Advance(time.Second - time.Nanosecond)
	select {
	case <-calls:
		t.Fatal("fn ran before its interval")
	default:
	}
	f.Advance(time.Nanosecond)
	<-calls
	<-f.TimerCreated() // the next wait, of the new interval
	f.Advance(time.Second)
	select {
	case <-calls:
		t.Fatal("fn ran after 1s of an interval changed to 2s")
	default:
	}
	f.Advance(time.Second)
	<-calls
	close(done)
	<-ended
	if n := f.Pending(); n != 0 {
		t.Errorf("%d timers left pending after Every returned, want 0", n)
	}
}

package reply

import (
	"testing"
	"time"
)

// A hint rounds up to whole seconds, at least 1.
func TestSeconds(t *testing.T) {
	for d, want := range map[time.Duration]int64{time.Millisecond: 1, time.Second: 1, 1001 * time.Millisecond: 2, 90 * time.Second: 90} {
		if got := seconds(d); got != want {
			t.Errorf("seconds(%v) = %d, want %d", d, got, want)
		}
	}
}

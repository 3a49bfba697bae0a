package bandwidth

import (
	"errors"
	"fmt"
	"time"

	"github.com/leveeproxy/levee/internal/clock"
)

// Defaults and bounds of Options.
const (
	// DefaultMaxDelay is the longest a transfer may wait for its next chunk before it is cut.
	DefaultMaxDelay = 5 * time.Second
	// DefaultChunk is the largest grant: a waiting connection gets its turn between chunks.
	DefaultChunk = 16 << 10
	// MinBurst is the smallest default burst; the default is max(Rate/10, MinBurst).
	MinBurst = 64 << 10
	// MaxRate bounds Rate so that one chunk always costs enough nanoseconds for the
	// per-chunk rounding (at most 1 ns, always against the transfer) to stay under 1%.
	MaxRate = 1 << 37 // about 137 GB/s
	// MaxBurst bounds Burst so that Burst·10⁹ fits in an int64.
	MaxBurst = 1 << 33 // 8 GiB
)

// ErrInvalidOptions is wrapped by every error of Options.Validate and New.
var ErrInvalidOptions = errors.New("bandwidth: invalid options")

// Options configure a Limiter. Byte sizes are in bytes, rates in bytes per second.
// Zero fields take their defaults in WithDefaults; nothing else is ever replaced.
type Options struct {
	// Name names the limit (the app) in errors and metrics.
	Name string
	// Rate is the sustained rate in bytes per second; > 0 and ≤ MaxRate.
	Rate int64
	// Burst is how many bytes an idle limiter admits at once. Default: one tenth of a
	// second's worth, at least MinBurst. It must hold at least two chunks.
	Burst int64
	// Chunk is the largest single grant in bytes. Default: min(DefaultChunk, Burst/4).
	Chunk int
	// MaxDelay is the longest wait for one chunk; a longer one cuts the transfer with a
	// *TooSlowError. Default DefaultMaxDelay.
	MaxDelay time.Duration
	// Clock is the time source. Default clock.Real{}.
	Clock clock.Clock
}

// WithDefaults returns o with its zero fields set to their defaults.
func (o Options) WithDefaults() Options {
	if o.Burst == 0 && o.Rate > 0 {
		o.Burst = max(o.Rate/10, MinBurst)
	}
	if o.Chunk == 0 && o.Burst > 0 {
		o.Chunk = int(max(min(DefaultChunk, o.Burst/4), 1))
	}
	if o.MaxDelay == 0 {
		o.MaxDelay = DefaultMaxDelay
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	return o
}

// Validate reports whether o, after WithDefaults, can be enforced. Messages name the field.
func (o Options) Validate() error {
	switch {
	case o.Rate <= 0 || o.Rate > MaxRate:
		return fmt.Errorf("%w: rate: must be in 1..%d bytes/s, got %d", ErrInvalidOptions, int64(MaxRate), o.Rate)
	case o.Burst < 1 || o.Burst > MaxBurst:
		return fmt.Errorf("%w: burst: must be in 1..%d bytes, got %d", ErrInvalidOptions, int64(MaxBurst), o.Burst)
	case o.Chunk < 1:
		return fmt.Errorf("%w: chunk: must be ≥ 1 byte, got %d", ErrInvalidOptions, o.Chunk)
	case int64(o.Chunk) > o.Burst/2 || 2*cost(int64(o.Chunk), o.Rate) > depth(o.Burst, o.Rate):
		return fmt.Errorf("%w: burst: must hold at least two chunks (2×%d bytes), got %d", ErrInvalidOptions, o.Chunk, o.Burst)
	case o.MaxDelay < time.Duration(cost(int64(o.Chunk), o.Rate)):
		return fmt.Errorf("%w: max_delay: must be at least one chunk's time (%v), got %v",
			ErrInvalidOptions, time.Duration(cost(int64(o.Chunk), o.Rate)), o.MaxDelay)
	case o.Clock == nil:
		return fmt.Errorf("%w: clock: must not be nil", ErrInvalidOptions)
	}
	return nil
}

// cost is the time n bytes take at rate, rounded up to a whole nanosecond: the bucket is
// charged at least the exact time, so rounding never lets a byte through early.
func cost(n, rate int64) int64 { return (n*int64(time.Second) + rate - 1) / rate }

// depth is the time burst bytes take at rate, rounded down, for the same reason.
func depth(burst, rate int64) int64 { return burst * int64(time.Second) / rate }

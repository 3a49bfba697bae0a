// Package membuf holds the bytes levee reads ahead of a slow party: a
// client's request body before the request takes a concurrency slot, a
// backend's response before a slow client has taken it. Every buffer is
// charged to one Budget for the process (server.buffer_memory), so that
// many slow clients cannot buy memory with them: a buffer that cannot grow
// stops, and its request streams instead.
package membuf

import (
	"io"
	"math/bits"
	"sync"
	"sync/atomic"
)

// Budget bounds the bytes held in Buffers at once. Safe for concurrent use.
type Budget struct {
	max   atomic.Int64
	used  atomic.Int64
	short atomic.Uint64
}

// NewBudget returns a budget of max bytes.
func NewBudget(max int64) *Budget {
	b := new(Budget)
	b.max.Store(max)
	return b
}

// SetMax resizes the budget (a reload); buffers held beyond a smaller max
// stay until they are freed, and no buffer grows until then.
func (b *Budget) SetMax(max int64) { b.max.Store(max) }

// Max is the budget's size in bytes.
func (b *Budget) Max() int64 { return b.max.Load() }

// Used is the bytes held now.
func (b *Budget) Used() int64 { return b.used.Load() }

// Short counts the times a buffer could not grow because the budget was
// spent (its request streamed instead).
func (b *Budget) Short() uint64 { return b.short.Load() }

func (b *Budget) take(n int64) bool {
	if b.used.Add(n) > b.max.Load() {
		b.used.Add(-n)
		b.short.Add(1)
		return false
	}
	return true
}

func (b *Budget) give(n int64) { b.used.Add(-n) }

// Buffer sizes go by powers of two from minClass; classes up to maxPooled
// are recycled.
const (
	minShift  = 12 // 4 KiB
	maxShift  = 24 // 16 MiB, config.MaxRequestBuffer
	maxPooled = 20 // 1 MiB
	// startMax is the largest first buffer: a client that declares a large
	// body and sends it slowly is charged as its bytes come, not at once.
	startMax = 16 << 10
)

var pools [maxPooled + 1]sync.Pool

func classOf(n int) uint {
	if n <= 1<<minShift {
		return minShift
	}
	return uint(bits.Len(uint(n - 1)))
}

// get returns an empty slice of capacity 1<<shift, and the pool's handle
// of it (nil for a class too large to pool).
func get(shift uint) ([]byte, *[]byte) {
	if shift > maxPooled {
		return make([]byte, 0, 1<<shift), nil
	}
	if p, ok := pools[shift].Get().(*[]byte); ok {
		return (*p)[:0], p
	}
	b := make([]byte, 0, 1<<shift)
	return b, &b
}

// put gives b back to its pool through its handle (nil: not pooled).
func put(b []byte, h *[]byte) {
	if h != nil {
		*h = b[:0]
		pools[classOf(cap(b))].Put(h)
	}
}

// Buffer is bytes read ahead, charged to a Budget by capacity. The zero
// value is not usable; Init it. Not safe for concurrent use.
type Buffer struct {
	b      []byte
	h      *[]byte // b's pool handle, reused so that a put allocates nothing
	budget *Budget
}

// Init makes buf an empty buffer charged to budget.
func (buf *Buffer) Init(budget *Budget) { buf.b, buf.h, buf.budget = nil, nil, budget }

// Bytes is what has been read; valid until Free.
func (buf *Buffer) Bytes() []byte { return buf.b }

// Len is the number of bytes read.
func (buf *Buffer) Len() int { return len(buf.b) }

// Fill reads from r until r ends, limit bytes are held, the budget cannot
// give the next size, or r fails. done reports that r ended (io.EOF) with
// everything in Bytes; err is r's error (never io.EOF). A Fill that stops
// early (done false, err nil) leaves the rest of r unread. limit must be at
// most 16 MiB.
func (buf *Buffer) Fill(r io.Reader, limit int) (done bool, err error) {
	for len(buf.b) < limit {
		if len(buf.b) == cap(buf.b) && !buf.grow(limit, startMax) {
			return false, nil
		}
		end := min(cap(buf.b), limit)
		n, err := r.Read(buf.b[len(buf.b):end])
		buf.b = buf.b[:len(buf.b)+n]
		switch {
		case err == io.EOF:
			return true, nil
		case err != nil:
			return false, err
		}
	}
	return false, nil
}

// grow moves the bytes to the next size class, within limit and the budget;
// an empty buffer starts at the class of first (capped at limit).
func (buf *Buffer) grow(limit, first int) bool {
	shift := classOf(min(limit, first))
	if cap(buf.b) > 0 {
		shift = classOf(cap(buf.b) + 1)
	}
	if shift > maxShift {
		return false
	}
	add := int64(1)<<shift - int64(cap(buf.b))
	if !buf.budget.take(add) {
		return false
	}
	nb, h := get(shift)
	nb = append(nb, buf.b...)
	buf.release()
	buf.b, buf.h = nb, h
	return true
}

// release gives the storage back to the pool (not the budget).
func (buf *Buffer) release() {
	if cap(buf.b) > 0 {
		put(buf.b, buf.h)
		buf.h = nil
	}
}

// Free gives the storage back and its bytes to the budget; buf is empty
// again, still charged to the same budget.
func (buf *Buffer) Free() {
	if c := cap(buf.b); c > 0 {
		buf.release()
		buf.budget.give(int64(c))
		buf.b = nil
	}
}

// Reserve grows buf at once to hold n bytes (at most 16 MiB), if the budget
// allows: for a body whose length is known and whose sender is not slow.
// It reports whether buf can now hold n bytes.
func (buf *Buffer) Reserve(n int) bool {
	for cap(buf.b) < n {
		if !buf.grow(n, n) {
			return false
		}
	}
	return true
}

// Append adds p within the capacity Reserve made; it reports false, adding
// nothing, if p does not fit.
func (buf *Buffer) Append(p []byte) bool {
	if len(buf.b)+len(p) > cap(buf.b) {
		return false
	}
	buf.b = append(buf.b, p...)
	return true
}

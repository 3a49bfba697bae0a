// Package spill holds responses on disk for clients that read them slowly,
// as nginx's proxy temp files do: the backend's body is written to a file
// as fast as the backend sends it, so the backend's connection and the
// app's concurrency slot go back when the backend has finished, and the
// client is fed from the file at its own pace.
//
// Every file is charged, by the size it will hold, to one Budget for the
// process (server.spill.budget), and is unlinked as soon as it is created:
// its descriptor keeps it, so nothing is left on disk once it is closed,
// or if levee dies. A response that cannot spill (the spill off, the
// budget spent, larger than the per-response cap, a file that cannot be
// made) streams as before, and the refusal is counted with its reason.
package spill

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
)

// Reasons a response was not spilled, as counted by Refused.
const (
	ReasonOff    = "off"    // server.spill.budget or limits.response_spill is 0
	ReasonSize   = "size"   // longer than limits.response_spill
	ReasonBudget = "budget" // server.spill.budget is spent
	ReasonError  = "error"  // the file could not be made or written
)

// Reasons lists every refusal reason, for metrics.
var Reasons = [...]string{ReasonOff, ReasonSize, ReasonBudget, ReasonError}

// Refusal is why Open made no file; its Reason is one of Reasons.
type Refusal struct {
	Reason string
	Err    error // the file system's error (ReasonError), else nil
}

func (r *Refusal) Error() string {
	if r.Err != nil {
		return fmt.Sprintf("spill: %s: %v", r.Reason, r.Err)
	}
	return "spill: refused: " + r.Reason
}

func (r *Refusal) Unwrap() error { return r.Err }

// Budget bounds the bytes all spill files of the process hold at once and
// makes them, in one directory. Safe for concurrent use.
type Budget struct {
	dir     string
	max     int64
	used    atomic.Int64
	spilled atomic.Uint64
	refused [len(Reasons)]atomic.Uint64
}

// NewBudget returns a budget of max bytes for files in dir ("" is
// os.TempDir()); a max of 0 spills nothing.
func NewBudget(dir string, max int64) *Budget {
	if dir == "" {
		dir = os.TempDir()
	}
	return &Budget{dir: dir, max: max}
}

// Check makes a file in the budget's directory and removes it, so that a
// directory levee cannot use is found at start rather than counted on each
// response; with a budget of 0 it checks nothing.
func (b *Budget) Check() error {
	if b.max <= 0 {
		return nil
	}
	f, err := os.CreateTemp(b.dir, "levee-spill-")
	if err != nil {
		return fmt.Errorf("spill: %w", err)
	}
	f.Close()
	if err := os.Remove(f.Name()); err != nil {
		return fmt.Errorf("spill: %w", err)
	}
	return nil
}

// Dir is where the files are made.
func (b *Budget) Dir() string { return b.dir }

// Max is the budget's size in bytes.
func (b *Budget) Max() int64 { return b.max }

// Used is the bytes the open files are charged now (see MinCharge).
func (b *Budget) Used() int64 { return b.used.Load() }

// Spilled counts the files Open has made.
func (b *Budget) Spilled() uint64 { return b.spilled.Load() }

// Refused counts the responses not spilled for reason (one of Reasons).
func (b *Budget) Refused(reason string) uint64 {
	for i, r := range Reasons {
		if r == reason {
			return b.refused[i].Load()
		}
	}
	return 0
}

// Refuse counts a response not spilled for reason (one of Reasons), for
// a refusal its caller decides (a write that failed mid-response).
func (b *Budget) Refuse(reason string) {
	for i, r := range Reasons {
		if r == reason {
			b.refused[i].Add(1)
			return
		}
	}
}

// MinCharge is the least a file is charged, however few bytes it holds:
// each open file holds a descriptor, so a budget of B bytes keeps at most
// B / MinCharge files open at once (16,384 for 1 GiB), whatever the
// responses' lengths.
const MinCharge = 64 << 10

// Open returns an empty file for exactly size bytes, charged to b (at
// least MinCharge), for a response whose whole length is total; limit is
// the per-response cap (limits.response_spill; 0: off). It makes the file
// and unlinks it at once. On failure it returns a *Refusal, counts it, and
// leaves b unchanged. The caller must Close the file.
func (b *Budget) Open(size, total, limit int64) (*File, error) {
	charge := max(size, MinCharge)
	switch {
	case b.max <= 0 || limit <= 0:
		return nil, b.refuse(ReasonOff, nil)
	case total > limit:
		return nil, b.refuse(ReasonSize, nil)
	case !b.take(charge):
		return nil, b.refuse(ReasonBudget, nil)
	}
	f, err := os.CreateTemp(b.dir, "levee-spill-")
	if err == nil {
		if err = os.Remove(f.Name()); err != nil {
			f.Close()
		}
	}
	if err != nil {
		b.used.Add(-charge)
		return nil, b.refuse(ReasonError, err)
	}
	b.spilled.Add(1)
	return &File{f: f, b: b, size: size, charge: charge}, nil
}

func (b *Budget) refuse(reason string, err error) error {
	b.Refuse(reason)
	return &Refusal{Reason: reason, Err: err}
}

func (b *Budget) take(n int64) bool {
	if b.used.Add(n) > b.max {
		b.used.Add(-n)
		return false
	}
	return true
}

// ErrOverflow is a Write past the size the file was opened for.
var ErrOverflow = errors.New("spill: more bytes than the file was opened for")

// File is one response's bytes on disk: written once, in order, up to its
// size, then read once, in order. Not safe for concurrent use.
type File struct {
	f       *os.File // nil once closed
	b       *Budget
	size    int64
	charge  int64 // to b: size, at least MinCharge
	written int64
	read    int64
}

// Size is the bytes f was opened for.
func (f *File) Size() int64 { return f.size }

// Len is the bytes written so far.
func (f *File) Len() int64 { return f.written }

// Write appends p. Past Size it writes what fits and fails with
// ErrOverflow.
func (f *File) Write(p []byte) (int, error) {
	if f.f == nil {
		return 0, os.ErrClosed
	}
	var over error
	if room := f.size - f.written; int64(len(p)) > room {
		p, over = p[:room], ErrOverflow
	}
	n, err := f.f.WriteAt(p, f.written)
	f.written += int64(n)
	if err == nil {
		err = over
	}
	return n, err
}

// copyBufs are Fill's read buffers.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// Fill writes what r reads into f until f holds Size bytes, and returns
// nil then; r's error (io.ErrUnexpectedEOF if r ends short) or a write's
// error otherwise. It reads no further than Size: r's end past it is left
// unread.
func (f *File) Fill(r io.Reader) error {
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	for f.written < f.size {
		want := min(int64(len(buf)), f.size-f.written)
		n, err := r.Read(buf[:want])
		if n > 0 {
			if _, werr := f.Write(buf[:n]); werr != nil {
				return werr
			}
		}
		switch {
		case err == io.EOF && f.written < f.size:
			return io.ErrUnexpectedEOF
		case err != nil && err != io.EOF:
			return err
		}
	}
	return nil
}

// Read reads what was written, in order; io.EOF once it has all been read.
func (f *File) Read(p []byte) (int, error) {
	if f.f == nil {
		return 0, os.ErrClosed
	}
	left := f.written - f.read
	if left == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > left {
		p = p[:left]
	}
	n, err := f.f.ReadAt(p, f.read)
	f.read += int64(n)
	if err == io.EOF && n == len(p) {
		err = nil
	}
	return n, err
}

// Close closes the file, which frees its disk space, and gives its charge
// back to the budget. It may be called more than once.
func (f *File) Close() error {
	if f.f == nil {
		return nil
	}
	err := f.f.Close()
	f.f = nil
	f.b.used.Add(-f.charge)
	return err
}

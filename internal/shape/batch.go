package shape

import (
	"fmt"
	"io"
)

// batchSpec is one batch limit with its prebuilt violations, shared by every
// BatchReader of a route.
type batchSpec struct {
	field    string
	max      int
	tooMany  *Violation
	notArray *Violation
}

func newBatchSpec(field string, max int) *batchSpec {
	return &batchSpec{
		field: field,
		max:   max,
		tooMany: newViolation(BatchItems, statusUnprocessable,
			"batch field %q has more than %d items", field, max),
		notArray: newViolation(BatchShape, statusUnprocessable,
			"batch field %q is not an array", field),
	}
}

// BatchReader passes a JSON request body through unchanged while it counts
// the items of one array field of the body's top-level object, and fails
// once there are too many. It never buffers the body: its state is a few
// hundred bytes whatever the body's size, and any split of the body into
// Reads gives the same result.
//
// Matching and counting:
//   - Only keys of the top-level object are matched; a key equal to the
//     field in a nested object is not the batch.
//   - Keys are compared after decoding their escapes ("ur\u0069s" is
//     "uris"), and without regard to case under Unicode case folding, as
//     Go's encoding/json matches struct fields: a backend that accepts
//     "URIS" for "uris" must not get an uncounted batch.
//   - A field that appears more than once counts the total of all its
//     arrays: whichever one the backend keeps, it holds at most Max items.
//   - Each direct element counts one, whatever it is: a nested array or
//     object inside an element is one item.
//   - The field's value must be an array or null (null, like an absent
//     field, is zero items); anything else is a batch-shape violation.
//
// The whole body is validated as JSON as it streams, so a malformed body can
// not slip an uncounted batch past the limit: see the package doc for the
// reasons and statuses.
//
// Read returns the bytes before the first offending byte together with the
// *Violation, and the same *Violation on every later call; it reads nothing
// more from the body. When the body's own Read fails with an error other
// than io.EOF (the client went away), that error is returned as it is. A
// BatchReader is not safe for concurrent use. Its zero value is not usable:
// get one from Checker.BatchReader or NewBatchReader.
type BatchReader struct {
	r   io.Reader
	err error
	s   scanner
	// The last byte read is held back until the next Read, so a body whose
	// JSON turns out incomplete at EOF never reaches the backend whole.
	held    byte
	hasHeld bool
	eof     bool // the underlying reader is done and the JSON was complete
}

// NewBatchReader returns a BatchReader over r that refuses more than max
// items in the top-level array field named field. A max below 0 acts as 0.
// It builds the violation messages for field and max; a Checker built by
// New does that once per route instead, so prefer Checker.BatchReader on the
// request path.
func NewBatchReader(r io.Reader, field string, max int) *BatchReader {
	b := &BatchReader{}
	b.reset(r, newBatchSpec(field, max))
	return b
}

// Reset makes b read from r with a fresh count and the same limit, so a
// BatchReader can be reused from a pool.
func (b *BatchReader) Reset(r io.Reader) { b.reset(r, b.s.spec) }

func (b *BatchReader) reset(r io.Reader, spec *batchSpec) {
	b.r = r
	b.err = nil
	b.s = scanner{spec: spec}
	b.hasHeld, b.eof = false, false
}

// Count returns the items counted so far (the total over all occurrences of
// the field). After a batch-items violation it is Max+1.
func (b *BatchReader) Count() int { return b.s.count }

// Read implements io.Reader. It passes bytes through unchanged, one byte
// behind the underlying reader: the body's last byte is released only once
// the JSON has been found complete, so a violation found at EOF (an
// unterminated body) leaves the backend with an incomplete body, never a
// whole one it might accept.
func (b *BatchReader) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	if b.eof {
		if b.hasHeld {
			p[0], b.hasHeld = b.held, false
			return 1, io.EOF
		}
		return 0, io.EOF
	}
	for {
		if b.hasHeld && len(p) == 1 {
			// No room beside the held byte: read the next one apart, so the
			// held one can go out (else this loop would spin forever).
			return b.readOne(p)
		}
		off := 0
		if b.hasHeld {
			p[0], b.hasHeld, off = b.held, false, 1
		}
		n, err := b.r.Read(p[off:])
		if n > 0 {
			if k, v := b.s.scan(p[off : off+n]); v != nil {
				b.err = v
				return off + k, v
			}
		}
		total := off + n
		switch {
		case err == io.EOF:
			if v := b.s.finish(); v != nil {
				b.err = v
				return max(total-1, 0), v // withhold the last byte
			}
			b.eof = true
			return total, io.EOF
		case err != nil:
			return total, err
		case total > 0:
			b.held, b.hasHeld = p[total-1], true
			if total > 1 {
				return total - 1, nil
			}
			// Only the held byte: read on rather than return 0, nil.
		}
	}
}

// readOne is Read into a one-byte p while a byte is held: p gets the held
// byte once the next one has been read (and becomes the held one).
func (b *BatchReader) readOne(p []byte) (int, error) {
	for {
		var one [1]byte
		n, err := b.r.Read(one[:])
		if n > 0 {
			p[0], b.held = b.held, one[0]
			if _, v := b.s.scan(one[:]); v != nil {
				b.err, b.hasHeld = v, false
				return 1, v
			}
			if err == io.EOF {
				if v := b.s.finish(); v != nil {
					b.err, b.hasHeld = v, false // withhold the last byte
					return 1, v
				}
				b.eof = true
				return 1, nil
			}
			return 1, err
		}
		switch {
		case err == io.EOF:
			if v := b.s.finish(); v != nil {
				b.err = v
				return 0, v // withhold the last byte
			}
			b.eof = true
			p[0], b.hasHeld = b.held, false
			return 1, io.EOF
		case err != nil:
			return 0, err
		}
	}
}

// String describes the limit, for logs and test failures.
func (b *BatchReader) String() string {
	return fmt.Sprintf("shape.BatchReader{field: %q, max: %d, count: %d}", b.s.spec.field, b.s.spec.max, b.s.count)
}

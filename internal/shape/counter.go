package shape

// BatchCounter counts a body's batch items as BatchReader does, from bytes
// it is shown rather than a reader it wraps: it passes nothing on and holds
// nothing back, so a caller that only measures (a shadowed limit) sends the
// body as it is. Not safe for concurrent use.
type BatchCounter struct {
	s   scanner
	err *Violation
}

// BatchCounter returns a counter of c's batch limit, or nil when the limit
// is off (or c is nil).
func (c *Checker) BatchCounter() *BatchCounter {
	if c == nil || c.batch == nil {
		return nil
	}
	return &BatchCounter{s: scanner{spec: c.batch}}
}

// Write scans the next bytes of the body. It returns the first violation
// found, then the same one on every later call, scanning no more.
func (b *BatchCounter) Write(p []byte) *Violation {
	if b.err == nil {
		_, b.err = b.s.scan(p)
	}
	return b.err
}

// End is the end of the body: the violation of a body whose JSON is
// incomplete, or the one Write found.
func (b *BatchCounter) End() *Violation {
	if b.err == nil {
		b.err = b.s.finish()
	}
	return b.err
}

// Count is the items counted so far.
func (b *BatchCounter) Count() int { return b.s.count }

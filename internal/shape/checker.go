package shape

import (
	"io"
	"strings"
)

// Checker applies one route's Limits. Build it once per route when the
// config loads; its checks then allocate nothing, whether they pass or
// refuse, because every Violation it can return is built by New. A Checker
// is immutable and safe for concurrent use. A nil *Checker checks nothing.
type Checker struct {
	limits Limits
	batch  *batchSpec // nil when the batch limit is off

	urlTooLong    *Violation
	tooManyValues *Violation
	headersTooBig *Violation
	tooManyFields *Violation
}

// New validates l and builds its Checker.
func New(l Limits) (*Checker, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	c := &Checker{
		limits: l,
		urlTooLong: newViolation(URLLength, statusURITooLong,
			"request target longer than %d bytes", l.MaxURLBytes),
		tooManyValues: newViolation(QueryValues, statusURITooLong,
			"more than %d query parameters", l.MaxQueryValues),
		headersTooBig: newViolation(HeaderBytes, statusHeaderFieldsTooLarge,
			"header fields larger than %d bytes", l.MaxHeaderBytes),
		tooManyFields: newViolation(HeaderCount, statusHeaderFieldsTooLarge,
			"more than %d header fields", l.MaxHeaderCount),
	}
	if l.Batch.On() {
		c.batch = newBatchSpec(l.Batch.JSONField, l.Batch.Max)
	}
	return c, nil
}

// Limits returns the limits c enforces.
func (c *Checker) Limits() Limits {
	if c == nil {
		return Limits{}
	}
	return c.limits
}

// CheckURL refuses a request target (the request-URI as sent, with its
// query) longer than MaxURLBytes. It returns nil when the target passes.
func (c *Checker) CheckURL(requestURI string) *Violation {
	if c == nil || c.limits.MaxURLBytes == 0 || len(requestURI) <= c.limits.MaxURLBytes {
		return nil
	}
	return c.urlTooLong
}

// CheckQuery refuses a raw query (without the '?') with more than
// MaxQueryValues parameters. A parameter is a non-empty run between '&'s,
// with or without a '=': "a=1&&b&" has two. ';' is not a separator (Go's
// url.ParseQuery refuses it), so "a=1;b=2" counts as one. It returns nil when
// the query passes.
func (c *Checker) CheckQuery(rawQuery string) *Violation {
	if c == nil || c.limits.MaxQueryValues == 0 {
		return nil
	}
	if CountQueryValues(rawQuery) <= c.limits.MaxQueryValues {
		return nil
	}
	return c.tooManyValues
}

// CheckTarget applies CheckURL to the request target and CheckQuery to its
// query, the part after the first '?'.
func (c *Checker) CheckTarget(requestURI string) *Violation {
	if v := c.CheckURL(requestURI); v != nil {
		return v
	}
	if i := strings.IndexByte(requestURI, '?'); i >= 0 {
		return c.CheckQuery(requestURI[i+1:])
	}
	return nil
}

// CheckHeaders refuses a header block of more than MaxHeaderCount fields or
// more than MaxHeaderBytes bytes (the sum of len(name)+len(value) over the
// fields; see HeaderSize). The count is checked first. It returns nil when
// the headers pass.
func (c *Checker) CheckHeaders(count, bytes int) *Violation {
	if c == nil {
		return nil
	}
	if c.limits.MaxHeaderCount > 0 && count > c.limits.MaxHeaderCount {
		return c.tooManyFields
	}
	if c.limits.MaxHeaderBytes > 0 && bytes > c.limits.MaxHeaderBytes {
		return c.headersTooBig
	}
	return nil
}

// BatchReader wraps a request body in a BatchReader that enforces the batch
// limit, or returns nil when the limit is off (or c is nil): the caller then
// reads the body directly. Use WrapBody when an io.Reader is all it needs.
func (c *Checker) BatchReader(body io.Reader) *BatchReader {
	if c == nil || c.batch == nil {
		return nil
	}
	b := &BatchReader{}
	b.reset(body, c.batch)
	return b
}

// WrapBody returns body wrapped in a BatchReader, or body itself when the
// batch limit is off.
func (c *Checker) WrapBody(body io.Reader) io.Reader {
	if b := c.BatchReader(body); b != nil {
		return b
	}
	return body
}

// CountQueryValues counts the non-empty '&'-separated parameters of a raw
// query. It does not allocate.
func CountQueryValues(rawQuery string) int {
	n := 0
	inParam := false
	for i := 0; i < len(rawQuery); i++ {
		if rawQuery[i] == '&' {
			inParam = false
		} else if !inParam {
			inParam = true
			n++
		}
	}
	return n
}

// HeaderSize returns the number of header fields in h and the sum of
// len(name)+len(value) over them, a repeated field counting once per value.
// It takes net/http's http.Header (a map[string][]string) without importing
// it; note that net/http keeps Host out of the map. It does not allocate.
func HeaderSize(h map[string][]string) (count, bytes int) {
	for name, values := range h {
		for _, v := range values {
			count++
			bytes += len(name) + len(v)
		}
	}
	return count, bytes
}

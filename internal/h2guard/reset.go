package h2guard

// Error codes of the RST_STREAM frames a server writes (RFC 9113 §7).
const (
	errCodeNo           = 0x0
	errCodeInternal     = 0x2
	errCodeStreamClosed = 0x5
	errCodeCancel       = 0x8
)

// hangUpSlots is how many of the streams the server last ended on its own
// a faults remembers.
const hangUpSlots = 8

// faults tells the RST_STREAM frames a server writes for the client's
// stream errors (RFC 9113 §5.4.2) from those it writes on its own account.
// A server resets a stream for the client's fault with any code but
// three: NO_ERROR (its handler answered before the request ended, §8.1),
// CANCEL (it no longer wants the stream) and INTERNAL_ERROR (its handler
// failed). After such a reset, the DATA the client had in flight on the
// stream draws a STREAM_CLOSED reset per frame (net/http's server answers
// each); up to free of those, per stream for the last hangUpSlots streams
// the server ended, are not the client's fault either.
//
// The zero value is ready to use. Not safe for concurrent use: the
// writer's. It allocates nothing.
type faults struct {
	hung [hangUpSlots]hangUp
	next int // the slot the next hang-up takes
}

// hangUp is a stream the server reset on its own account.
type hangUp struct {
	stream uint32 // 0: none
	free   int    // STREAM_CLOSED resets still free on it
}

// reset reports whether the server's RST_STREAM on stream with code
// answers the client's fault; free is Limits.InFlightResets.
func (r *faults) reset(stream, code uint32, free int) bool {
	switch code {
	case errCodeNo, errCodeCancel, errCodeInternal:
		r.hung[r.next] = hangUp{stream: stream, free: free}
		r.next = (r.next + 1) % len(r.hung)
		return false
	case errCodeStreamClosed:
		for i := range r.hung {
			if h := &r.hung[i]; h.stream == stream && stream != 0 && h.free > 0 {
				h.free--
				return false
			}
		}
	}
	return true
}

package ratelimit

import (
	"fmt"
	"strconv"
	"time"
)

// Policy is one named limit as advertised by the RateLimit-Policy and RateLimit response
// header fields of the IETF httpapi draft (draft-ietf-httpapi-ratelimit-headers, -08 and
// later), which are RFC 9651 structured-field Lists of Items whose bare item is the policy
// name as a String:
//
//	RateLimit-Policy: "app";q=750;w=1;levee-burst=75
//	RateLimit: "app";r=12;t=3
//
// q is the quota per window w (whole seconds): round(w/T), the sustained rate. levee-burst
// is B, a vendor parameter as the draft asks. r is Decision.Remaining, the requests that
// would be admitted now (at most B, so it can be below q), and t the whole seconds, rounded
// up, until the bucket is full again, or, on a rejection, until the request may be retried,
// so that t names the same instant as Retry-After (as the draft says it should).
//
// Build a Policy once per route when the config loads; it is immutable and safe to share.
// The zero Policy has an empty name and header.
type Policy struct {
	name   string // the name as an sf-string, quotes included
	header string // the RateLimit-Policy value
}

// NewPolicy returns the Policy named name for lim, advertised over window. name must be
// printable ASCII (it is quoted and escaped); window must be whole seconds, and 0 picks one:
// 1s, or T rounded up to whole seconds when T is longer. It fails when lim is invalid or
// the window is shorter than half of T (the quota would round to 0).
func NewPolicy(name string, lim Limit, window time.Duration) (Policy, error) {
	if err := lim.Validate(); err != nil {
		return Policy{}, err
	}
	q, ok := sfString(nil, name)
	if !ok {
		return Policy{}, fmt.Errorf("ratelimit: policy name %q must be printable ASCII", name)
	}
	if window == 0 {
		window = max(time.Second, (lim.Interval+time.Second-1)/time.Second*time.Second)
	}
	if window < time.Second || window%time.Second != 0 {
		return Policy{}, fmt.Errorf("ratelimit: policy %q: window %v must be whole seconds ≥ 1s", name, window)
	}
	quota := (int64(window) + int64(lim.Interval)/2) / int64(lim.Interval) // round(w/T)
	if quota < 1 {
		return Policy{}, fmt.Errorf("ratelimit: policy %q: window %v is too short for one request every %v", name, window, lim.Interval)
	}
	h := append([]byte(nil), q...)
	h = append(h, ";q="...)
	h = strconv.AppendInt(h, quota, 10)
	h = append(h, ";w="...)
	h = strconv.AppendInt(h, int64(window/time.Second), 10)
	h = append(h, ";levee-burst="...)
	h = strconv.AppendInt(h, int64(lim.Burst), 10)
	return Policy{name: string(q), header: string(h)}, nil
}

// Header returns the RateLimit-Policy field value, e.g. `"app";q=750;w=1;levee-burst=75`.
func (p Policy) Header() string { return p.header }

// AppendRateLimit appends the RateLimit field value for d, e.g. `"app";r=12;t=3`, to dst.
// It allocates nothing when dst has room (about 40 bytes more than the name).
func (p Policy) AppendRateLimit(dst []byte, d Decision) []byte {
	wait := d.Reset
	if !d.Allowed {
		wait = d.RetryAfter
	}
	dst = append(dst, p.name...)
	dst = append(dst, ";r="...)
	dst = strconv.AppendInt(dst, int64(max(d.Remaining, 0)), 10)
	dst = append(dst, ";t="...)
	return strconv.AppendInt(dst, ceilSeconds(wait), 10)
}

// RetryAfterSeconds returns the Retry-After value for a rejection: d.RetryAfter in whole
// seconds rounded up, at least 1, so a client that honours it finds the request conforming.
func RetryAfterSeconds(d Decision) int64 { return max(ceilSeconds(d.RetryAfter), 1) }

// AppendRetryAfter appends RetryAfterSeconds(d) in decimal to dst.
func AppendRetryAfter(dst []byte, d Decision) []byte {
	return strconv.AppendInt(dst, RetryAfterSeconds(d), 10)
}

func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

// sfString appends s as an RFC 9651 String (DQUOTE, with \ and " escaped); it reports
// false if s has a byte outside printable ASCII.
func sfString(dst []byte, s string) ([]byte, bool) {
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c > 0x7e {
			return nil, false
		}
		if c == '"' || c == '\\' {
			dst = append(dst, '\\')
		}
		dst = append(dst, c)
	}
	return append(dst, '"'), true
}

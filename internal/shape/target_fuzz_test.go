package shape

import (
	"strings"
	"testing"
)

// queryValuesOracle counts a query's parameters the slow, obvious way: the
// non-empty pieces between '&'s.
func queryValuesOracle(q string) int {
	n := 0
	for _, p := range strings.Split(q, "&") {
		if p != "" {
			n++
		}
	}
	return n
}

// FuzzCheckTarget checks CheckTarget and CheckHeaders on arbitrary targets
// and limits: no panic, nil exactly when every limit that is on holds (by an
// independent count), and a refusal is a 4xx of the limit that failed.
func FuzzCheckTarget(f *testing.F) {
	f.Add("/photos/1?size=large&x", uint16(0), uint16(0), uint16(3), uint16(40), uint16(0), uint16(0))
	f.Add("/a?b=1&&c&", uint16(10), uint16(2), uint16(1), uint16(1), uint16(1), uint16(1))
	f.Add("http://h.test/?a;b=2&c?d&e", uint16(64), uint16(2), uint16(2), uint16(10), uint16(1), uint16(9))
	f.Add("\x00?\xff&\xfe&&", uint16(3), uint16(1), uint16(0), uint16(0), uint16(0), uint16(0))
	f.Add("?", uint16(1), uint16(1), uint16(100), uint16(100), uint16(100), uint16(100))
	f.Fuzz(func(t *testing.T, target string, maxURL, maxQuery, count, size, maxCount, maxBytes uint16) {
		c, err := New(Limits{MaxURLBytes: int(maxURL), MaxQueryValues: int(maxQuery),
			MaxHeaderCount: int(maxCount), MaxHeaderBytes: int(maxBytes)})
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		var nilChecker *Checker
		if v := nilChecker.CheckTarget(target); v != nil {
			t.Fatalf("nil Checker refused %q: %v", target, v)
		}

		urlOK := maxURL == 0 || len(target) <= int(maxURL)
		queryOK := true
		if _, q, ok := strings.Cut(target, "?"); ok {
			queryOK = maxQuery == 0 || queryValuesOracle(q) <= int(maxQuery)
		}
		v := c.CheckTarget(target)
		switch {
		case urlOK && queryOK:
			if v != nil {
				t.Fatalf("target %q within limits refused: %v", target, v)
			}
		case v == nil:
			t.Fatalf("target %q passed: url ok %v, query ok %v", target, urlOK, queryOK)
		case !urlOK && v.Reason != URLLength, urlOK && v.Reason != QueryValues:
			t.Fatalf("target %q refused for %s (url ok %v)", target, v.Reason, urlOK)
		}
		if v != nil && (v.Status < 400 || v.Status > 499 || v.Msg == "") {
			t.Fatalf("violation %+v: want a 4xx with a message", v)
		}

		countOK := maxCount == 0 || count <= maxCount
		bytesOK := maxBytes == 0 || size <= maxBytes
		h := c.CheckHeaders(int(count), int(size))
		switch {
		case countOK && bytesOK:
			if h != nil {
				t.Fatalf("headers %d/%d within limits refused: %v", count, size, h)
			}
		case h == nil:
			t.Fatalf("headers %d/%d passed limits %d/%d", count, size, maxCount, maxBytes)
		case !countOK && h.Reason != HeaderCount, countOK && h.Reason != HeaderBytes:
			t.Fatalf("headers refused for %s, count ok %v", h.Reason, countOK)
		}
		if h != nil && (h.Status < 400 || h.Status > 499 || h.Msg == "") {
			t.Fatalf("violation %+v: want a 4xx with a message", h)
		}
	})
}

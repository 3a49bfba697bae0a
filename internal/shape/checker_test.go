package shape

import (
	"io"
	"strings"
	"testing"
)

func mustNew(t testing.TB, l Limits) *Checker {
	t.Helper()
	c, err := New(l)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCountQueryValues(t *testing.T) {
	for _, tt := range []struct {
		q    string
		want int
	}{
		{"", 0},
		{"a", 1},
		{"a=1", 1},
		{"a=1&b=2", 2},
		{"a=1&&b&", 2},
		{"&&&", 0},
		{"=&=", 2},
		{"a=1;b=2", 1},
		{"a=%26&b", 2},
	} {
		if got := CountQueryValues(tt.q); got != tt.want {
			t.Errorf("CountQueryValues(%q) = %d, want %d", tt.q, got, tt.want)
		}
	}
}

func TestChecks(t *testing.T) {
	c := mustNew(t, Limits{MaxURLBytes: 20, MaxQueryValues: 2, MaxHeaderBytes: 100, MaxHeaderCount: 3})
	for _, tt := range []struct {
		name   string
		v      *Violation
		reason Reason
		status int
		msg    string
	}{
		{"url at limit", c.CheckURL(strings.Repeat("a", 20)), "", 0, ""},
		{"url over", c.CheckURL(strings.Repeat("a", 21)), URLLength, 414, "request target longer than 20 bytes"},
		{"query at limit", c.CheckQuery("a=1&b=2"), "", 0, ""},
		{"query over", c.CheckQuery("a&b&c"), QueryValues, 414, "more than 2 query parameters"},
		{"target ok", c.CheckTarget("/p?a=1&b=2"), "", 0, ""},
		{"target no query", c.CheckTarget("/p"), "", 0, ""},
		{"target long", c.CheckTarget("/p?a=1&b=2&cccccccc=3"), URLLength, 414, "request target longer than 20 bytes"},
		{"target query", c.CheckTarget("/?a&b&c"), QueryValues, 414, "more than 2 query parameters"},
		{"headers at limit", c.CheckHeaders(3, 100), "", 0, ""},
		{"header count", c.CheckHeaders(4, 10), HeaderCount, 431, "more than 3 header fields"},
		{"header bytes", c.CheckHeaders(1, 101), HeaderBytes, 431, "header fields larger than 100 bytes"},
		{"header count first", c.CheckHeaders(4, 101), HeaderCount, 431, "more than 3 header fields"},
	} {
		if tt.reason == "" {
			if tt.v != nil {
				t.Errorf("%s: got %v, want pass", tt.name, tt.v)
			}
			continue
		}
		if tt.v == nil || tt.v.Reason != tt.reason || tt.v.Status != tt.status || tt.v.Msg != tt.msg {
			t.Errorf("%s: got %+v, want {%s %d %q}", tt.name, tt.v, tt.reason, tt.status, tt.msg)
		}
	}
}

// Zero limits, and a nil Checker, check nothing.
func TestChecksOff(t *testing.T) {
	long := strings.Repeat("a&", 10000)
	for name, c := range map[string]*Checker{"zero": mustNew(t, Limits{}), "nil": nil} {
		if v := c.CheckTarget("/?" + long); v != nil {
			t.Errorf("%s: CheckTarget = %v", name, v)
		}
		if v := c.CheckHeaders(1<<20, 1<<30); v != nil {
			t.Errorf("%s: CheckHeaders = %v", name, v)
		}
		body := strings.NewReader(`[not json`)
		if r := c.WrapBody(body); r != io.Reader(body) {
			t.Errorf("%s: WrapBody wrapped the body with the batch limit off", name)
		}
		if c.BatchReader(body) != nil {
			t.Errorf("%s: BatchReader != nil with the batch limit off", name)
		}
	}
}

func TestCheckerBatch(t *testing.T) {
	c := mustNew(t, Limits{Batch: Batch{JSONField: "ids", Max: 2}})
	r := c.WrapBody(strings.NewReader(`{"ids":[1,2,3]}`))
	b, ok := r.(*BatchReader)
	if !ok {
		t.Fatalf("WrapBody returned %T, want *BatchReader", r)
	}
	got := readAll(b)
	if got.reason() != BatchItems || got.err.Error() != `shape: batch-items: batch field "ids" has more than 2 items` {
		t.Errorf("err = %v", got.err)
	}
	// Two readers of one Checker share its violations.
	got2 := readAll(c.BatchReader(strings.NewReader(`{"ids":[1,2,3]}`)))
	if got2.err != got.err {
		t.Errorf("readers of one Checker return different violations: %p, %p", got.err, got2.err)
	}
}

func TestHeaderSize(t *testing.T) {
	h := map[string][]string{"Accept": {"a", "bb"}, "X-Key": {"secret"}, "Empty": {}}
	count, bytes := HeaderSize(h)
	if want := 6 + 1 + 6 + 2 + 5 + 6; count != 3 || bytes != want {
		t.Errorf("HeaderSize = %d, %d; want 3, %d", count, bytes, want)
	}
}

func TestValidate(t *testing.T) {
	for _, tt := range []struct {
		l    Limits
		want string // substring of the error; "" means valid
	}{
		{Limits{}, ""},
		{Limits{MaxHeaderBytes: 1, MaxHeaderCount: 1, MaxURLBytes: 1, MaxQueryValues: 1, Batch: Batch{"uris", 1}}, ""},
		{Limits{MaxHeaderBytes: -1}, "shape: MaxHeaderBytes: must be ≥ 0 (got -1)"},
		{Limits{MaxHeaderCount: -1}, "MaxHeaderCount"},
		{Limits{MaxURLBytes: -1}, "MaxURLBytes"},
		{Limits{MaxQueryValues: -1}, "MaxQueryValues"},
		{Limits{Batch: Batch{"uris", -1}}, "Batch.Max: must be ≥ 0"},
		{Limits{Batch: Batch{JSONField: "uris"}}, `Batch.Max: must be ≥ 1 when Batch.JSONField is set ("uris")`},
		{Limits{Batch: Batch{Max: 3}}, "Batch.JSONField: must be set"},
	} {
		err := tt.l.Validate()
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%+v: %v", tt.l, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%+v: err = %v, want %q", tt.l, err, tt.want)
		}
		if _, err2 := New(tt.l); (err2 == nil) != (err == nil) {
			t.Errorf("%+v: New err = %v, Validate err = %v", tt.l, err2, err)
		}
	}
	err := Limits{MaxURLBytes: -1, MaxQueryValues: -2}.Validate()
	if err == nil || !strings.Contains(err.Error(), "MaxURLBytes") || !strings.Contains(err.Error(), "MaxQueryValues") {
		t.Errorf("Validate reports only the first error: %v", err)
	}
}

// The pre-body checks allocate nothing, whether they pass or refuse.
func TestChecksDoNotAllocate(t *testing.T) {
	c := mustNew(t, Limits{MaxURLBytes: 64, MaxQueryValues: 4, MaxHeaderBytes: 100, MaxHeaderCount: 3})
	h := map[string][]string{"Accept": {"*/*"}, "Host": {"example.com"}}
	for name, f := range map[string]func(){
		"pass": func() {
			_ = c.CheckTarget("/objects?a=1&b=2")
			n, b := HeaderSize(h)
			_ = c.CheckHeaders(n, b)
		},
		"refuse": func() {
			_ = c.CheckTarget("/objects?a=1&b=2&c&d&e")
			_ = c.CheckTarget("/" + "objects/objects/objects/objects/objects/objects/objects/objects/")
			_ = c.CheckHeaders(4, 1000)
		},
	} {
		if allocs := testing.AllocsPerRun(100, f); allocs != 0 {
			t.Errorf("%s: %v allocations, want 0", name, allocs)
		}
	}
}

// Counting a body through a reused BatchReader allocates nothing, and
// neither does refusing it.
func TestBatchReaderDoesNotAllocate(t *testing.T) {
	c := mustNew(t, Limits{Batch: Batch{JSONField: "uris", Max: 3}})
	ok := []byte(`{"uris":["a","b","c"],"x":{"y":[1,2,true,null]}}`)
	over := []byte(`{"uris":["a","b","c","d"]}`)
	body := &bytesReader{}
	b := c.BatchReader(body)
	buf := make([]byte, 16)
	for name, data := range map[string][]byte{"pass": ok, "refuse": over} {
		allocs := testing.AllocsPerRun(100, func() {
			body.b = data
			b.Reset(body)
			for {
				if _, err := b.Read(buf); err != nil {
					break
				}
			}
		})
		if allocs != 0 {
			t.Errorf("%s: %v allocations, want 0", name, allocs)
		}
	}
}

// bytesReader is a resettable reader that does not allocate.
type bytesReader struct{ b []byte }

func (r *bytesReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
}

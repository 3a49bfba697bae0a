package shape

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/iotest"
)

// result is what reading a body through a BatchReader gave.
type result struct {
	out   string // the bytes passed through
	count int
	err   error
}

// same reports whether two results are equal, comparing errors by text
// (each NewBatchReader builds its own violations).
func (r result) same(o result) bool {
	return r.out == o.out && r.count == o.count && fmt.Sprint(r.err) == fmt.Sprint(o.err)
}

func (r result) reason() Reason {
	var v *Violation
	if errors.As(r.err, &v) {
		return v.Reason
	}
	return ""
}

// readAll reads r to its end or first error, like io.ReadAll, but keeps the
// error.
func readAll(b *BatchReader) result { return readSized(b, func() int { return 512 }) }

// readSized is readAll into buffers of size() bytes each read, as a writer
// with a nearly full buffer asks (bufio.Writer.ReadFrom: one byte at times).
func readSized(b *BatchReader, size func() int) result {
	var out bytes.Buffer
	buf := make([]byte, 512)
	for reads := 0; ; reads++ {
		if reads > 1<<16 { // no body here is that long: Read makes no progress
			return result{out: out.String(), count: b.Count(), err: errors.New("Read made no progress")}
		}
		n, err := b.Read(buf[:size()])
		out.Write(buf[:n])
		if err == io.EOF {
			return result{out: out.String(), count: b.Count()}
		}
		if err != nil {
			return result{out: out.String(), count: b.Count(), err: err}
		}
	}
}

// chunkReader returns data in reads of sizes drawn from rng (1..max).
type chunkReader struct {
	data []byte
	rng  *rand.Rand
	max  int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := 1 + c.rng.IntN(c.max)
	n = min(n, len(p), len(c.data))
	copy(p, c.data[:n])
	c.data = c.data[n:]
	return n, nil
}

func TestBatchReader(t *testing.T) {
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	tests := []struct {
		name   string
		body   string
		field  string
		max    int
		count  int
		reason Reason
		out    string // passed-through bytes when an error cut the body; "" means all
	}{
		{name: "two items", body: `{"uris":["a","b"]}`, count: 2},
		{name: "empty array", body: `{"uris":[]}`, count: 0},
		{name: "empty object", body: `{}`},
		{name: "empty body", body: ``},
		{name: "whitespace body", body: " \r\n\t "},
		{name: "absent field", body: `{"other":[1,2,3,4,5,6,7]}`},
		{name: "at max", body: `{"uris":[1,2,3]}`, max: 3, count: 3},
		{name: "over max cuts before the item", body: `{"uris":["a","b", "c"]}`, max: 2,
			count: 3, reason: BatchItems, out: `{"uris":["a","b", `},
		{name: "max zero", body: `{"uris":[]}`, max: 0},
		{name: "max zero item", body: `{"uris":[1]}`, max: 0, count: 1, reason: BatchItems, out: `{"uris":[`},
		{name: "negative max acts as zero", body: `{"uris":[1]}`, max: -5, count: 1, reason: BatchItems, out: `{"uris":[`},
		{name: "nested elements count one each",
			body: `{"uris":[{"a":[1,2,{"uris":[1,2]}]},[1,[2]],"x",-1.5e3,true,false,null,{}]}`, count: 8},
		{name: "other fields before and after",
			body: `{"a":[1,2,3],"b":{"uris":[1,2,3]},"uris":[1],"c":"uris"}`, count: 1},
		{name: "nested field is not the batch", body: `{"x":{"uris":[1,2,3,4,5]}}`, max: 1},
		{name: "strings with quotes and brackets",
			body: `{"uris":["a\"],[", "]", "\\", "{\"uris\":[1,2]}", "\u005d"]}`, count: 5},
		{name: "key with escaped quote is not field", body: `{"uris\"":[1,2,3]}`, max: 1},
		{name: "value equal to field is not a key", body: `{"a":"uris","b":[1,2,3]}`, max: 1},
		{name: "whitespace everywhere",
			body: " \n{ \"uris\" \t:\r\n [ 1 , \"b\" ,\n{ } , [ ] ] , \"z\" : null } \n", count: 4},
		{name: "field twice counts the total", body: `{"uris":[1,2],"x":0,"uris":[3]}`, count: 3},
		{name: "field twice over max", body: `{"uris":[1,2],"uris":[3]}`, max: 2,
			count: 3, reason: BatchItems, out: `{"uris":[1,2],"uris":[`},
		{name: "escaped key", body: `{"ur\u0069s":[1,2,3]}`, count: 3},
		{name: "escaped key upper hex", body: `{"\u0055\u0052\u0049\u0053":[1,2]}`, count: 2},
		{name: "key case folds", body: `{"URIs":[1,2,3]}`, count: 3},
		{name: "key folds Kelvin sign", body: `{"\u212aey":[1]}`, field: "key", count: 1},
		{name: "key folds long s raw", body: `{"uriſ":[1]}`, count: 1},
		{name: "surrogate pair key", body: `{"a\ud83d\ude00":[1,2]}`, field: "a😀", count: 2},
		{name: "raw UTF-8 key", body: `{"a😀":[1,2]}`, field: "a😀", count: 2},
		{name: "lone surrogate is U+FFFD", body: `{"a\ud83d":[1,2]}`, field: "a\uFFFD", count: 2},
		{name: "lone low surrogate is U+FFFD", body: `{"\ude00b":[1,2]}`, field: "\uFFFDb", count: 2},
		{name: "high surrogate then escape", body: `{"\ud83d\n":[1,2]}`, field: "\uFFFD\n", count: 2},
		{name: "two high surrogates then low", body: `{"\ud83d\ud83d\ude00":[1]}`, field: "\uFFFD😀", count: 1},
		{name: "invalid UTF-8 is U+FFFD per byte", body: "{\"\xe2\x82x\":[1]}", field: "\uFFFD\uFFFDx", count: 1},
		{name: "key prefix is not field", body: `{"uri":[1,2],"urisx":[1,2]}`, max: 1},
		{name: "null field", body: `{"uris":null}`},
		{name: "string field", body: `{"uris":"a"}`, reason: BatchShape, out: `{"uris":`},
		{name: "object field", body: `{"uris":{"a":1}}`, reason: BatchShape, out: `{"uris":`},
		{name: "number field", body: `{"uris":5}`, reason: BatchShape, out: `{"uris":`},
		{name: "top-level array", body: ` [1,2,3]`, reason: BatchShape, out: ` `},
		{name: "top-level string", body: `"uris"`, reason: BatchShape},
		{name: "not JSON", body: `uris=1&uris=2`, reason: BatchJSON},
		{name: "trailing comma", body: `{"uris":[1,2,]}`, count: 2, reason: BatchJSON, out: `{"uris":[1,2,`},
		{name: "missing colon", body: `{"uris" [1]}`, reason: BatchJSON, out: `{"uris" `},
		{name: "single quotes", body: `{'uris':[1]}`, reason: BatchJSON, out: `{`},
		{name: "truncated", body: `{"uris":[1,2`, count: 2, reason: BatchJSON, out: `{"uris":[1,`},
		{name: "truncated in string", body: `{"uris":["ab`, count: 1, reason: BatchJSON, out: `{"uris":["a`},
		{name: "trailing data", body: `{"uris":[1]} {}`, count: 1, reason: BatchJSON, out: `{"uris":[1]} `},
		{name: "mismatched close", body: `{"uris":[1}`, count: 1, reason: BatchJSON, out: `{"uris":[1`},
		{name: "bad escape", body: `{"a":"\x"}`, reason: BatchJSON, out: `{"a":"\`},
		{name: "bad hex", body: `{"a":"\u12g4"}`, reason: BatchJSON, out: `{"a":"\u12`},
		{name: "control byte in string", body: "{\"a\":\"\x01\"}", reason: BatchJSON, out: `{"a":"`},
		{name: "bad literal", body: `{"uris":[tru]}`, count: 1, reason: BatchJSON, out: `{"uris":[tru`},
		{name: "leading zero", body: `{"a":01}`, reason: BatchJSON, out: `{"a":0`},
		{name: "bare minus", body: `{"a":-}`, reason: BatchJSON, out: `{"a":-`},
		{name: "bare dot", body: `{"a":1.}`, reason: BatchJSON, out: `{"a":1.`},
		{name: "bare exponent", body: `{"a":1e+}`, reason: BatchJSON, out: `{"a":1e+`},
		{name: "numbers", body: `{"uris":[0,-0,1.5,-0.5e-10,1E+2,12e3,99]}`, count: 7},
		{name: "depth at limit", body: `{"a":` + deep(MaxDepth-1) + `}`},
		{name: "depth over limit", body: `{"a":` + deep(MaxDepth) + `}`, reason: BatchShape,
			out: `{"a":` + strings.Repeat("[", MaxDepth-1)},
		{name: "depth inside batch", body: `{"uris":[` + deep(MaxDepth-2) + `]}`, count: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			field := tt.field
			if field == "" {
				field = "uris"
			}
			max := tt.max
			if max == 0 && !strings.HasPrefix(tt.name, "max zero") {
				max = 100
			}
			got := readAll(NewBatchReader(strings.NewReader(tt.body), field, max))
			if got.reason() != tt.reason {
				t.Fatalf("err = %v, want reason %q", got.err, tt.reason)
			}
			if tt.reason == "" && got.err != nil {
				t.Fatalf("err = %v", got.err)
			}
			if got.count != tt.count {
				t.Errorf("Count() = %d, want %d", got.count, tt.count)
			}
			want := tt.body
			if tt.reason != "" && (tt.out != "" || tt.reason != BatchJSON) {
				want = tt.out
			}
			if tt.reason == BatchJSON && tt.out == "" {
				want = "" // refused at the first byte
			}
			if got.out != want {
				t.Errorf("passed through %q, want %q", got.out, want)
			}
		})
	}
}

func TestBatchViolationMessage(t *testing.T) {
	body := `{"uris":[` + strings.Repeat(`"x",`, 200) + `"x"]}`
	got := readAll(NewBatchReader(strings.NewReader(body), "uris", 100))
	var v *Violation
	if !errors.As(got.err, &v) {
		t.Fatalf("err = %v, want a *Violation", got.err)
	}
	if v.Status != 422 || v.Reason != BatchItems || v.Msg != `batch field "uris" has more than 100 items` {
		t.Errorf("violation = %+v", *v)
	}
	if want := "shape: batch-items: " + v.Msg; v.Error() != want {
		t.Errorf("Error() = %q, want %q", v.Error(), want)
	}
}

// countingReader counts the bytes taken from the body.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// The incident: a 20,000-item batch is cut off at item 101, after reading
// at most one more chunk of the body, and nothing is read after the error.
func TestBatchReaderStopsEarly(t *testing.T) {
	var body strings.Builder
	body.WriteString(`{"uris":[`)
	for i := range 20000 {
		if i > 0 {
			body.WriteByte(',')
		}
		fmt.Fprintf(&body, `"https://example.com/object/%06d"`, i)
	}
	body.WriteString(`]}`)
	src := &countingReader{r: iotest.HalfReader(strings.NewReader(body.String()))}
	b := NewBatchReader(src, "uris", 100)
	n, err := io.Copy(io.Discard, b)
	var v *Violation
	if !errors.As(err, &v) || v.Reason != BatchItems {
		t.Fatalf("err = %v, want batch-items", err)
	}
	item101 := strings.Index(body.String(), `"https://example.com/object/000100"`)
	if n != int64(item101) {
		t.Errorf("passed %d bytes, want %d (everything before item 101)", n, item101)
	}
	if src.n > item101+32*1024 {
		t.Errorf("read %d bytes of a %d-byte body, want the body cut off near item 101", src.n, body.Len())
	}
	before := src.n
	if k, err2 := b.Read(make([]byte, 100)); k != 0 || err2 != err {
		t.Errorf("Read after violation = %d, %v; want 0, the same violation", k, err2)
	}
	if src.n != before {
		t.Errorf("Read after violation read %d more bytes from the body", src.n-before)
	}
}

// A failing body (the client went away) is the body's error, not a
// violation, so the edge does not answer 400 to nobody.
func TestBatchReaderPassesBodyError(t *testing.T) {
	gone := errors.New("connection reset")
	r := io.MultiReader(strings.NewReader(`{"uris":[1,`), iotest.ErrReader(gone))
	got := readAll(NewBatchReader(r, "uris", 10))
	if got.err != gone {
		t.Fatalf("err = %v, want %v", got.err, gone)
	}
	if got.out != `{"uris":[1,` || got.count != 1 {
		t.Errorf("got %+v", got)
	}
}

func TestBatchReaderReset(t *testing.T) {
	b := NewBatchReader(strings.NewReader(`{"uris":[1,2,3]}`), "uris", 2)
	if got := readAll(b); got.reason() != BatchItems {
		t.Fatalf("first body: %v", got.err)
	}
	b.Reset(strings.NewReader(`{"uris":[1,2]}`))
	if got := readAll(b); got.err != nil || got.count != 2 {
		t.Fatalf("after Reset: %+v", got)
	}
}

// chunkBodies are bodies whose result must not depend on how they are split.
var chunkBodies = []string{
	`{"uris":["a","b"]}`,
	`{"uris":["a\"],[", "]", "\\", "\u005d", "\ud83d\ude00"], "x": {"uris": [1,2,3]}}`,
	`{"ur\u0069s":[1,2,3],"URIS":[4],"uriſ":[5,6]}`,
	`{"a\ud83d\ude00":[1,2],"a😀":[3]}`,
	"{\"\xe2\x82x\":[1], \"\xf0\x9f\x98\x80\":[2,3]}",
	`{"uris":[0,-0,1.5,-0.5e-10,1E+2,12e3,99,true,false,null,{},[]]}`,
	`{"uris":[1,2,3,4,5,6,7,8,9,10,11,12]}`,
	`{"uris":[1,2,`,
	`{"uris":[1,2,]}`,
	`{"uris":"x"}`,
	`[1,2]`,
	`{"uris":[1]} x`,
	` `,
	``,
}

// Every body gives the same bytes, count and error whether it arrives whole,
// one byte at a time, or in random chunks.
func TestBatchReaderChunking(t *testing.T) {
	fields := []string{"uris", "a😀", "\uFFFD\uFFFDx", "😀"}
	for _, body := range chunkBodies {
		for _, field := range fields {
			for _, max := range []int{0, 1, 3, 10} {
				whole := readAll(NewBatchReader(strings.NewReader(body), field, max))
				check := func(how string, r io.Reader) {
					t.Helper()
					got := readAll(NewBatchReader(r, field, max))
					if !got.same(whole) {
						t.Errorf("body %q field %q max %d %s: got %+v, whole gave %+v", body, field, max, how, got, whole)
					}
				}
				check("one byte at a time", iotest.OneByteReader(strings.NewReader(body)))
				// Read into one-byte buffers: the held byte must still go out
				// (this once spun forever, a CPU-bound hang per request).
				got := readSized(NewBatchReader(strings.NewReader(body), field, max), func() int { return 1 })
				if !got.same(whole) {
					t.Errorf("body %q field %q max %d read into 1-byte buffers: got %+v, whole gave %+v", body, field, max, got, whole)
				}
				sizes := rand.New(rand.NewPCG(2, uint64(len(body))))
				got = readSized(NewBatchReader(iotest.OneByteReader(strings.NewReader(body)), field, max),
					func() int { return 1 + sizes.IntN(3) })
				if !got.same(whole) {
					t.Errorf("body %q field %q max %d read into 1-3 byte buffers: got %+v, whole gave %+v", body, field, max, got, whole)
				}
				rng := rand.New(rand.NewPCG(1, uint64(len(body))))
				for range 20 {
					check("random chunks", &chunkReader{data: []byte(body), rng: rng, max: 7})
				}
			}
		}
	}
}

// Splitting the body at every byte gives the same result as reading it whole.
func TestBatchReaderEverySplit(t *testing.T) {
	for _, body := range chunkBodies {
		whole := readAll(NewBatchReader(strings.NewReader(body), "uris", 3))
		for i := range len(body) + 1 {
			r := io.MultiReader(strings.NewReader(body[:i]), strings.NewReader(body[i:]))
			if got := readAll(NewBatchReader(r, "uris", 3)); !got.same(whole) {
				t.Errorf("body %q split at %d: got %+v, whole gave %+v", body, i, got, whole)
			}
		}
	}
}

// skipPlain agrees with a byte-at-a-time scan for every byte value at every
// position of a word.
func TestSkipPlain(t *testing.T) {
	naive := func(p []byte, i int) int {
		for i < len(p) && plain[p[i]] {
			i++
		}
		return i
	}
	p := []byte(strings.Repeat("abcdefgh\x80\xff\x7f~ ", 3))
	for c := range 256 {
		for pos := range len(p) {
			q := append([]byte(nil), p...)
			q[pos] = byte(c)
			for start := range 4 {
				if got, want := skipPlain(q, start), naive(q, start); got != want {
					t.Fatalf("byte %#x at %d, start %d: skipPlain = %d, want %d", c, pos, start, got, want)
				}
			}
		}
	}
}

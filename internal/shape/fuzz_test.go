package shape

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"testing/iotest"
)

// onlySpace reports whether b holds nothing but JSON whitespace.
func onlySpace(b []byte) bool {
	for _, c := range b {
		if !isSpace(c) {
			return false
		}
	}
	return true
}

// maxDepth returns the deepest nesting of valid JSON.
func maxDepth(b []byte) int {
	depth, deepest, inString, escaped := 0, 0, false, false
	for _, c := range b {
		switch {
		case escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case c == '"':
			inString = !inString
		case inString:
		case c == '[' || c == '{':
			depth++
			deepest = max(deepest, depth)
		case c == ']' || c == '}':
			depth--
		}
	}
	return deepest
}

// oracle tells, with encoding/json, what a BatchReader must make of valid
// JSON no deeper than MaxDepth: the count and the reason (or "" to pass).
// It walks the top-level keys in order, so a field that appears twice, or
// in two cases, counts the total, and the first problem met is the one due.
func oracle(t *testing.T, data []byte, field string, limit int) (int, Reason) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber() // a top-level 1E1000 is valid JSON but no float64
	tok, err := dec.Token()
	if err != nil {
		t.Fatalf("oracle: %v", err)
	}
	if tok != json.Delim('{') {
		return 0, BatchShape
	}
	count := 0
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			t.Fatalf("oracle: %v", err)
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			t.Fatalf("oracle: %v", err)
		}
		if !strings.EqualFold(key.(string), field) {
			continue
		}
		if string(raw) == "null" {
			continue
		}
		var items []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			return count, BatchShape
		}
		if count+len(items) > max(limit, 0) {
			return max(limit, 0) + 1, BatchItems
		}
		count += len(items)
	}
	return count, ""
}

func FuzzBatchReader(f *testing.F) {
	for _, body := range chunkBodies {
		f.Add([]byte(body), "uris", uint8(3))
	}
	f.Add([]byte(`{"uris":[{"a":[1,2,{"uris":[1,2]}]},[1,[2]],"x",-1.5e3,true,false,null,{}]}`), "uris", uint8(100))
	f.Add([]byte(`{"\u212aey":[1,2],"KEY":[3]}`), "key", uint8(2))
	f.Add([]byte(`{"a\ud83d\ude00":[1,2],"\ud83d\ud83d\ude00":[1]}`), "a😀", uint8(1))
	f.Add([]byte("{\"\xe2\x82x\":[1,2]}"), "\uFFFD\uFFFDx", uint8(1))
	f.Add([]byte(`{"uris":null,"uris":"x"}`), "uris", uint8(5))
	f.Fuzz(func(t *testing.T, data []byte, field string, limit uint8) {
		max := int(limit)
		whole := readAll(NewBatchReader(bytes.NewReader(data), field, max))
		if !bytes.HasPrefix(data, []byte(whole.out)) {
			t.Fatalf("passed through %q, not a prefix of the body", whole.out)
		}
		if whole.err == nil && whole.out != string(data) {
			t.Fatalf("passed through %q without error, want the whole body", whole.out)
		}
		if whole.err != nil {
			var v *Violation
			if !errors.As(whole.err, &v) {
				t.Fatalf("err = %v, want a *Violation", whole.err)
			}
		}
		if whole.count > max+1 {
			t.Fatalf("counted %d items past max %d", whole.count, max)
		}
		oneByte := readAll(NewBatchReader(iotest.OneByteReader(bytes.NewReader(data)), field, max))
		if !oneByte.same(whole) {
			t.Fatalf("one byte at a time gave %+v, whole gave %+v", oneByte, whole)
		}

		switch {
		case onlySpace(data):
			if whole.err != nil {
				t.Fatalf("empty body: %v", whole.err)
			}
		case !json.Valid(data):
			// A malformed body never passes: either its items ran out first
			// or it is refused as not JSON.
			if whole.err == nil {
				t.Fatalf("invalid JSON passed with count %d", whole.count)
			}
		case maxDepth(data) > MaxDepth:
			if whole.err == nil {
				t.Fatalf("JSON nested %d deep passed", maxDepth(data))
			}
		default:
			count, reason := oracle(t, data, field, max)
			if whole.reason() != reason || whole.count != count {
				t.Fatalf("got count %d, err %v; encoding/json says count %d, reason %q", whole.count, whole.err, count, reason)
			}
		}
	})
}

func jsonValid(b []byte) bool { return json.Valid(b) }

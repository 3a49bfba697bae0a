package topview

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

func TestSanitize(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"batch-importer", "batch-importer"},
		{"10.0.0.1:5555", "10.0.0.1:5555"},
		{"\x1b[31mred\x1b[0m", `\x1b[31mred\x1b[0m`},
		{"\x1b]0;title\x07", `\x1b]0;title\a`},
		{"a\tb\nc\rd", `a\tb\nc\rd`},
		{"\x00\x7f", `\x00\x7f`},
		{"\u009b2J", `\u009b2J`},                     // C1 CSI
		{"abc\u202edef\u2066", `abc\u202edef\u2066`}, // bidi override, isolate
		{"zero\u200bwidth", `zero\u200bwidth`},
		{"bad\xffutf8\xc3", `bad\xffutf8\xc3`},
		{"日本語 ok", "日本語 ok"},
	} {
		if got := Sanitize(tc.in); got != tc.want {
			t.Errorf("Sanitize(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestFit(t *testing.T) {
	for _, tc := range []struct {
		in   string
		w    int
		want string
	}{
		{"abcdef", 0, "abcdef"},
		{"abcdef", 6, "abcdef"},
		{"abcdef", 5, "abcd…"},
		{"abcdef", 1, "…"},
		{"日本語", 5, "日本…"},
		{"日本語", 4, "日…"},
		{"日本語", 2, "…"},
		{"\x1b[2J", 4, `\x1…`},
	} {
		if got := fit(tc.in, tc.w); got != tc.want || (tc.w > 0 && Width(got) > tc.w) {
			t.Errorf("fit(%q, %d) = %q (%d wide), want %q", tc.in, tc.w, got, Width(got), tc.want)
		}
	}
}

// FuzzSanitize: whatever a client sends, what is printed is valid UTF-8
// without a control or format character, and cut to any width it fits.
func FuzzSanitize(f *testing.F) {
	for _, s := range []string{"plain", "\x1b[2J", "\u202e", "\xff\xfe", "日本語", "a\u0301"} {
		f.Add(s, 10)
	}
	f.Fuzz(func(t *testing.T, s string, w int) {
		out := Sanitize(s)
		if !utf8.ValidString(out) {
			t.Fatalf("Sanitize(%q) = %q: not UTF-8", s, out)
		}
		for _, r := range out {
			if unicode.Is(unicode.Cc, r) || unicode.Is(unicode.Cf, r) {
				t.Fatalf("Sanitize(%q) = %q holds %U", s, out, r)
			}
		}
		if Sanitize(out) != out {
			t.Fatalf("Sanitize is not idempotent on %q", s)
		}
		w = w%200 + 1
		if w < 1 {
			w += 200
		}
		if got := fit(s, w); Width(got) > w || !strings.HasPrefix(out, strings.TrimSuffix(got, "…")) {
			t.Fatalf("fit(%q, %d) = %q, %d wide", s, w, got, Width(got))
		}
	})
}

func TestParseKeys(t *testing.T) {
	got := ParseKeys([]byte("jk\x1b[A\x1b[Bbwxq\x03\x1bOB"))
	want := []Key{KeyDown, KeyUp, KeyUp, KeyDown, KeyBy, KeyWindow, KeyQuit, KeyQuit, KeyDown}
	if len(got) != len(want) {
		t.Fatalf("ParseKeys = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("ParseKeys = %v, want %v", got, want)
		}
	}
	if Next([]string{"a", "b"}, "b") != "a" || Next([]string{"a", "b"}, "x") != "a" {
		t.Fatal("Next")
	}
}

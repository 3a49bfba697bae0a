package topview

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/width"
)

// Sanitize makes s safe to print on a terminal: every control character
// (C0, DEL, C1, so ESC and with it every escape sequence), every format
// character (bidirectional overrides, zero-width joiners) and every byte
// that is not UTF-8 is written as a Go escape (\x1b, \u202e, \xff)
// instead. Client names are what clients send; printed as they are, one
// could move the cursor, recolour the screen or retitle the window.
func Sanitize(s string) string {
	clean := true
	for _, r := range s {
		if unsafeRune(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			b.WriteString(`\x`)
			b.WriteString(strconv.FormatUint(uint64(s[i])|0x100, 16)[1:])
		case unsafeRune(r):
			q := strconv.QuoteRuneToASCII(r) // '\x1b', '\u202e'
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteRune(r)
		}
		i += n
	}
	return b.String()
}

func unsafeRune(r rune) bool {
	return r == utf8.RuneError || unicode.Is(unicode.Cc, r) || unicode.Is(unicode.Cf, r)
}

// cells is how many terminal columns r takes: 2 for East Asian wide and
// full-width runes, 0 for combining marks, else 1. r is sanitized.
func cells(r rune) int {
	switch {
	case unicode.Is(unicode.Mn, r) || unicode.Is(unicode.Me, r):
		return 0
	}
	switch width.LookupRune(r).Kind() {
	case width.EastAsianWide, width.EastAsianFullwidth:
		return 2
	}
	return 1
}

// Width is how many terminal columns s takes once sanitized.
func Width(s string) int {
	n := 0
	for _, r := range Sanitize(s) {
		n += cells(r)
	}
	return n
}

// fit sanitizes s and cuts it to at most w columns (w ≤ 0: no limit),
// ending a cut string with "…".
func fit(s string, w int) string {
	s = Sanitize(s)
	if w <= 0 {
		return s
	}
	n := 0
	for i, r := range s {
		c := cells(r)
		if n+c > w {
			return cutAt(s, i, n, w)
		}
		n += c
	}
	return s
}

// cutAt ends s before byte i (where n columns are used) with "…", taking
// runes back off the end until the ellipsis fits in w.
func cutAt(s string, i, n, w int) string {
	s = s[:i]
	for n+1 > w && s != "" {
		r, size := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-size]
		n -= cells(r)
	}
	if n+1 > w {
		return s
	}
	return s + "…"
}

// pad is fit(s, w) padded with spaces to exactly w columns.
func pad(s string, w int) string {
	s = fit(s, w)
	return s + strings.Repeat(" ", max(0, w-Width(s)))
}

package shape

import (
	"unicode"
	"unicode/utf8"
)

// keyMatcher compares a JSON object key, fed in pieces as it streams, with
// a field name under Unicode case folding (strings.EqualFold). It decodes the
// key exactly as encoding/json does: escapes are resolved, a \u escape pair
// that forms a surrogate pair is one rune and any other surrogate is U+FFFD,
// and each byte of invalid UTF-8 is U+FFFD.
type keyMatcher struct {
	field   string
	pos     int  // bytes of field matched so far
	active  bool // the open key still matches field's prefix
	pending [utf8.UTFMax]byte
	npend   int  // bytes of an incomplete UTF-8 sequence in pending
	high    rune // a high surrogate from \u waiting for its low half, or 0
}

func (k *keyMatcher) start(field string) {
	*k = keyMatcher{field: field, active: true}
}

// matched reports whether the key just closed equals field. The caller has
// flushed pending bytes; a pending surrogate is resolved here.
func (k *keyMatcher) matched() bool {
	k.flushHigh()
	ok := k.active && k.pos == len(k.field)
	k.active = false
	return ok
}

// byte feeds one raw byte of the key (not '"', '\' or a control byte).
func (k *keyMatcher) byte(c byte) {
	if !k.active {
		return
	}
	k.flushHigh()
	if c < utf8.RuneSelf {
		k.flushBytes()
		k.rune(rune(c))
		return
	}
	k.pending[k.npend] = c
	k.npend++
	if !utf8.FullRune(k.pending[:k.npend]) {
		return
	}
	r, size := utf8.DecodeRune(k.pending[:k.npend])
	if size == k.npend {
		k.npend = 0
		k.rune(r)
		return
	}
	// The sequence broke at c: the bytes before it are one U+FFFD each and
	// c starts afresh, as utf8.DecodeRune would decode the whole key.
	k.npend--
	k.flushBytes()
	k.byte(c)
}

// flushBytes turns the bytes of an incomplete UTF-8 sequence into U+FFFD
// each: the sequence ended (at a quote, an escape or an ASCII byte).
func (k *keyMatcher) flushBytes() {
	for ; k.npend > 0; k.npend-- {
		k.rune(utf8.RuneError)
	}
}

// flushHigh resolves a high surrogate that no low half followed.
func (k *keyMatcher) flushHigh() {
	if k.high != 0 {
		k.high = 0
		k.rune(unicode.ReplacementChar)
	}
}

// escaped feeds the rune of a one-character escape such as \n.
func (k *keyMatcher) escaped(r rune) {
	if !k.active {
		return
	}
	k.flushHigh()
	k.rune(r)
}

// utf16 feeds the value of a \uXXXX escape.
func (k *keyMatcher) utf16(r rune) {
	if !k.active {
		return
	}
	if k.high != 0 {
		high := k.high
		k.high = 0
		if 0xDC00 <= r && r <= 0xDFFF {
			k.rune((high-0xD800)<<10 | (r - 0xDC00) + 0x10000)
			return
		}
		k.rune(unicode.ReplacementChar)
		if !k.active {
			return
		}
	}
	switch {
	case 0xD800 <= r && r <= 0xDBFF:
		k.high = r
	case 0xDC00 <= r && r <= 0xDFFF:
		k.rune(unicode.ReplacementChar)
	default:
		k.rune(r)
	}
}

// rune compares the next decoded rune of the key with the next of field.
func (k *keyMatcher) rune(r rune) {
	if !k.active {
		return
	}
	if k.pos == len(k.field) {
		k.active = false
		return
	}
	fr, size := utf8.DecodeRuneInString(k.field[k.pos:])
	if !foldEqual(r, fr) {
		k.active = false
		return
	}
	k.pos += size
}

// foldEqual reports whether two runes are equal under simple Unicode case
// folding, as strings.EqualFold compares them.
func foldEqual(sr, tr rune) bool {
	if sr == tr {
		return true
	}
	if tr < sr {
		sr, tr = tr, sr
	}
	if tr < utf8.RuneSelf {
		return 'A' <= sr && sr <= 'Z' && tr == sr+'a'-'A'
	}
	r := unicode.SimpleFold(sr)
	for r != sr && r < tr {
		r = unicode.SimpleFold(r)
	}
	return r == tr
}

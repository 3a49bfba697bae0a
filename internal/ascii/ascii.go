// Package ascii compares header names and tokens as HTTP reads them: in
// ASCII, ignoring case, without allocating, on bytes or strings alike.
package ascii

// EqualFold reports whether b equals s in ASCII, ignoring case.
func EqualFold[T string | []byte](b T, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		if Lower(b[i]) != Lower(s[i]) {
			return false
		}
	}
	return true
}

// Lower is c in lower case, if it is an ASCII letter.
func Lower(c byte) byte {
	if c >= 'A' && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// IsTokenByte reports whether c may appear in a token (RFC 9110 §5.6.2):
// a field name, a chunk extension's name, a method.
func IsTokenByte(c byte) bool {
	if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' {
		return true
	}
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
		return true
	}
	return false
}

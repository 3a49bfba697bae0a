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

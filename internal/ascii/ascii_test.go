package ascii

import "testing"

func TestEqualFold(t *testing.T) {
	for _, tc := range []struct {
		b, s string
		want bool
	}{
		{"Content-Length", "content-length", true},
		{"CONTENT-LENGTH", "Content-Length", true},
		{"content-lengthx", "content-length", false},
		{"content_length", "content-length", false},
		{"\xc4\xb0", "i\xcc\x87", false}, // no Unicode folding: bytes are compared as ASCII
		{"", "", true},
	} {
		if got := EqualFold(tc.b, tc.s); got != tc.want {
			t.Errorf("EqualFold(%q, %q) = %v", tc.b, tc.s, got)
		}
		if got := EqualFold([]byte(tc.b), tc.s); got != tc.want {
			t.Errorf("EqualFold([]byte(%q), %q) = %v", tc.b, tc.s, got)
		}
	}
}

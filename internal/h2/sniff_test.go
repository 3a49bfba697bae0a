package h2

import "testing"

// TestNotHTTP: an h2c listener closes, without an answer, a connection
// whose first line names no HTTP version (h2spec's invalid preface); any
// other line is HTTP/1.x's to judge.
func TestNotHTTP(t *testing.T) {
	for in, want := range map[string]bool{
		"INVALID CONNECTION PREFACE\r\n\r\n": true,
		"GET / FTP/1.0\r\n":                  true,
		"GET / HTTP/1.1\r\nHost: x\r\n\r\n":  false,
		"GET / http/1.1\r\n":                 false,
		"GET / HTTP/1.1 \r\n":                false,
		"GET / HTTP/\r\r1.1\r\n":             false,
		"GET /\r\n":                          false,
		"GET /\nHTTP/1.1\r\n":                false,
		"GET / HTTP/1.1":                     false, // no whole line yet
		"INVALID CONNECTION PREFACE":         false,
	} {
		if got := notHTTP([]byte(in)); got != want {
			t.Errorf("notHTTP(%q) = %v, want %v", in, got, want)
		}
	}
}

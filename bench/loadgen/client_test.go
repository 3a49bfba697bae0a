package main

import (
	"bufio"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestReadResponse(t *testing.T) {
	cases := []struct {
		name   string
		in     string
		status int
		keep   bool
		rest   string // what must be left unread (the next response)
	}{
		{"content-length", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloNEXT", 200, true, "NEXT"},
		{"503 close", "HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\ncontent-length: 3\r\n\r\nbusNEXT", 503, false, "NEXT"},
		{"chunked", "HTTP/1.1 429 Too Many\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n10\r\n0123456789abcdef\r\n0\r\nTrailer: 1\r\n\r\nNEXT", 429, true, "NEXT"},
		{"http/1.0", "HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\nNEXT", 200, false, "NEXT"},
		{"http/1.0 keep-alive", "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\nNEXT", 200, true, "NEXT"},
		{"until eof", "HTTP/1.1 502 Bad Gateway\r\n\r\nbody to eof", 502, false, ""},
		{"interim 100", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\nNEXT", 204, true, "NEXT"},
	}
	for _, c := range cases {
		br := bufio.NewReader(strings.NewReader(c.in))
		status, keep, got, err := readResponse(br)
		if err != nil || status != c.status || keep != c.keep || !got {
			t.Errorf("%s: status %d keep %v got %v err %v", c.name, status, keep, got, err)
			continue
		}
		rest, _ := io.ReadAll(br)
		if string(rest) != c.rest {
			t.Errorf("%s: left %q, want %q", c.name, rest, c.rest)
		}
	}
}

func TestReadResponseErrors(t *testing.T) {
	for _, in := range []string{
		"SSH-2.0-OpenSSH\r\n",
		"HTTP/1.1 2x0 OK\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
		"HTTP/1.1 200 OK\r\nno colon\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
	} {
		_, _, _, err := readResponse(bufio.NewReader(strings.NewReader(in)))
		if !errors.Is(err, errBadResponse) {
			t.Errorf("%q: err %v, want malformed", in, err)
		}
	}
	// nothing at all: EOF, and got=false so a stale keep-alive connection is retried
	_, _, got, err := readResponse(bufio.NewReader(strings.NewReader("")))
	if err != io.EOF || got {
		t.Errorf("empty: got %v err %v", got, err)
	}
	// truncated body
	_, _, _, err = readResponse(bufio.NewReader(strings.NewReader("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")))
	if err == nil {
		t.Error("truncated body: no error")
	}
}

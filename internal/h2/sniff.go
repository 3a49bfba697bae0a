package h2

import (
	"bytes"
	"crypto/tls"
	"errors"
	"net"
	"strings"
)

// Telling HTTP/2 apart before it is served: a TLS connection by ALPN
// (Adequate says whether its TLS may carry HTTP/2), a plain h2c one by
// its first bytes (PeekPreface). The listener that sorts connections
// between the engines calls them; the rules are HTTP/2's.

// Adequate reports whether a TLS connection may carry HTTP/2 (RFC 9113
// §9.2): TLS 1.3, or 1.2 with an ephemeral key exchange and an AEAD
// cipher.
func Adequate(cs *tls.ConnectionState) bool {
	if cs.Version >= tls.VersionTLS13 {
		return true
	}
	name := tls.CipherSuiteName(cs.CipherSuite)
	return cs.Version == tls.VersionTLS12 && strings.HasPrefix(name, "TLS_ECDHE_") &&
		(strings.Contains(name, "_GCM_") || strings.Contains(name, "_CHACHA20_"))
}

// PeekPreface reads from c until its first bytes either are the HTTP/2
// preface or cannot be; the returned conn replays what was read. Bytes
// that are not the preface are HTTP/1.x's to judge, but for a first line
// that names no HTTP version at all (its last word does not begin with
// "HTTP/"): such a client speaks neither protocol, and is treated as an
// HTTP/2 client whose preface is invalid (RFC 9113 §3.4): closed without
// an answer (ErrNotHTTP).
func PeekPreface(c net.Conn) (net.Conn, bool, error) {
	var buf [firstLineMax]byte
	n := 0
	for n < len(clientPreface) {
		m, err := c.Read(buf[n:len(clientPreface)])
		n += m
		if !strings.HasPrefix(clientPreface, string(buf[:n])) {
			break // HTTP/1.x: the first byte that differs settles it
		}
		if err != nil {
			return nil, false, err
		}
	}
	if string(buf[:n]) == clientPreface {
		return &replayConn{Conn: c, head: append([]byte(nil), buf[:n]...)}, true, nil
	}
	// The rest of the first line, if it comes at once (a client that
	// dribbles it, or a long one, goes to HTTP/1.x as it is).
	for bytes.IndexByte(buf[:n], '\n') < 0 && n < len(buf) {
		m, err := c.Read(buf[n:])
		n += m
		if err != nil {
			break
		}
	}
	if notHTTP(buf[:n]) {
		return nil, false, ErrNotHTTP
	}
	return &replayConn{Conn: c, head: append([]byte(nil), buf[:n]...)}, false, nil
}

// firstLineMax bounds how much of a first line PeekPreface reads.
const firstLineMax = 1024

var ErrNotHTTP = errors.New("h2: neither HTTP/1.x nor the HTTP/2 preface")

// notHTTP reports whether b holds a whole first line of three words or
// more (split at spaces) whose last does not begin with "HTTP/" (in any
// case): no request line of any HTTP version.
func notHTTP(b []byte) bool {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		return false
	}
	var words []string
	for _, w := range strings.Split(string(bytes.TrimRight(b[:i], "\r")), " ") {
		if w != "" {
			words = append(words, w)
		}
	}
	if len(words) < 3 {
		return false
	}
	last := words[len(words)-1]
	return len(last) < 5 || !strings.EqualFold(last[:5], "HTTP/")
}

// replayConn gives back the bytes PeekPreface read before the rest of the
// connection.
type replayConn struct {
	net.Conn
	head []byte
}

// Replay is c with head, bytes already read of it, read first: for a
// connection an engine looked at before it hands it to another (the
// sniff here; the event loop's hand-off to fasthttp).
func Replay(c net.Conn, head []byte) net.Conn { return &replayConn{Conn: c, head: head} }

// CloseWrite half-closes the connection underneath, for a lingering close.
func (c *replayConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

// NetConn is the connection underneath, as *tls.Conn offers it.
func (c *replayConn) NetConn() net.Conn { return c.Conn }

func (c *replayConn) Read(p []byte) (int, error) {
	if len(c.head) > 0 {
		n := copy(p, c.head)
		c.head = c.head[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

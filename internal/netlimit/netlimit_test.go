package netlimit

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/testnet"
)

func TestMinRateDeadlines(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m := MinRate{Rate: 1000, Grace: 10 * time.Second}
	limit := start.Add(time.Minute)
	for _, tc := range []struct {
		name string
		got  time.Time
		want time.Time
	}{
		{"the first byte: the grace", m.Deadline(start, 1, time.Time{}), start.Add(10*time.Second + time.Millisecond)},
		{"5000 bytes: 5 s past the grace", m.Deadline(start, 5000, limit), start.Add(15 * time.Second)},
		{"capped at the transfer's own timeout", m.Deadline(start, 1e6, limit), limit},
		{"far past any timeout, without overflow", m.Deadline(start, 1<<62, time.Time{}), time.Time{}},
		{"off", MinRate{}.Deadline(start, 5000, limit), limit},
		// A write is timed alone: 2000 bytes at 1000/s, not before the grace ends.
		{"a write within the grace", m.WriteDeadline(start, start.Add(time.Second), 2000, limit), start.Add(10 * time.Second)},
		{"a write after the grace", m.WriteDeadline(start, start.Add(20*time.Second), 2000, limit), start.Add(22 * time.Second)},
		{"a write capped", m.WriteDeadline(start, start.Add(59*time.Second), 2000, limit), limit},
	} {
		if !tc.got.Equal(tc.want) {
			t.Errorf("%s: %v; want %v", tc.name, tc.got.Sub(start), tc.want.Sub(start))
		}
	}
}

// A client that stops sending is cut off with ErrTooSlow at its deadline; at
// the transfer's own limit it is a plain timeout.
func TestPacedReaderCutsAStalledClient(t *testing.T) {
	for _, tc := range []struct {
		name    string
		rate    MinRate
		limit   time.Duration
		tooSlow bool
	}{
		{"min_rate first", MinRate{Rate: 1 << 20, Grace: 50 * time.Millisecond}, time.Minute, true},
		{"read_timeout first", MinRate{Rate: 1, Grace: time.Minute}, 50 * time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, server := testnet.TCPPair(t)
			client.Write([]byte("abc"))
			now := time.Now()
			r := &PacedReader{R: server, Conn: server, Rate: tc.rate, Start: now, Limit: now.Add(tc.limit)}
			buf := make([]byte, 10)
			if n, err := r.Read(buf); n != 3 || err != nil {
				t.Fatalf("first read = %d, %v; want the 3 bytes sent", n, err)
			}
			_, err := r.Read(buf)
			if errors.Is(err, ErrTooSlow) != tc.tooSlow || err == nil {
				t.Fatalf("read of a stalled client = %v; want ErrTooSlow %v", err, tc.tooSlow)
			}
		})
	}
}

// Connections past PerIP from one address are refused with the refusal
// written; an exempt address is not counted; a closed connection frees its
// place.
func TestListenerPerIP(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var rejected []string
	ln := NewWith(raw, Options{Max: 100, PerIP: 1,
		Refusal:  func(reason string) []byte { return []byte("no: " + reason) },
		OnReject: func(reason string) { rejected = append(rejected, reason) }})
	defer ln.Close()
	accepted := make(chan net.Conn, 10)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", raw.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	first := dial()
	held := <-accepted
	second := dial()
	if _, err := io.WriteString(second, "GET / HTTP/1.1\r\nHost: a\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	second.SetReadDeadline(time.Now().Add(5 * time.Second))
	if b, err := io.ReadAll(second); string(b) != "no: "+ConnsPerIP || err != nil {
		t.Fatalf("second connection from one address read %q, %v; want the refusal, then the close", b, err)
	}
	held.Close()
	first.Close()
	dial()
	select {
	case <-accepted:
	case <-time.After(5 * time.Second):
		t.Fatal("a closed connection's place was not freed")
	}
	if len(rejected) != 1 || rejected[0] != ConnsPerIP {
		t.Fatalf("rejections %v; want one %s", rejected, ConnsPerIP)
	}
}

// A refusal answers the request: nothing is written to a refused
// connection before its request's first bytes (a client that has not
// sent it yet would take it for no answer at all), and the refusal then
// comes whole, with the close.
func TestRefusalWaitsForTheRequest(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rejected := make(chan string, 1)
	ln := NewWith(raw, Options{Max: 1, Refusal: func(reason string) []byte { return []byte("no: " + reason) },
		OnReject: func(reason string) { rejected <- reason }})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	first, err := net.Dial("tcp", raw.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	second, err := net.Dial("tcp", raw.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	<-rejected // (written at accept, the refusal is in second's buffer by now)
	second.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if n, err := second.Read(make([]byte, 64)); n > 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a refused connection read %d bytes (%v) before sending its request; want none", n, err)
	}
	if _, err := io.WriteString(second, "GET / HTTP/1.1\r\nHost: a\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	second.SetReadDeadline(time.Now().Add(5 * time.Second))
	if b, err := io.ReadAll(second); string(b) != "no: "+MaxConns || err != nil {
		t.Fatalf("after its request the refused connection read %q, %v; want the refusal, then the close", b, err)
	}
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestLingerKeepsTheAnswer: a server that answers a client still sending,
// and closes, must not destroy its answer with a reset (closing with unread
// input sends one). Without Linger, the client's read fails with ECONNRESET
// in most of these rounds.
func TestLingerKeepsTheAnswer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const answer = "refused\n"
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				cc := Wrap(c)
				buf := make([]byte, 4096)
				io.ReadFull(cc, buf) // part of what the client sends
				cc.Write([]byte(answer))
				cc.Linger()
				cc.Close()
			}()
		}
	}()
	for round := range 20 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		sent := make(chan struct{})
		go func() { // more than the server reads, past its socket buffer
			defer close(sent)
			chunk := make([]byte, 64<<10)
			for range 4 {
				if _, err := c.Write(chunk); err != nil {
					return
				}
			}
		}()
		got, err := io.ReadAll(c)
		<-sent
		c.Close()
		if err != nil || string(got) != answer {
			t.Fatalf("round %d: read %q, %v; want %q and the end", round, got, err, answer)
		}
	}
}

// TestLingerIsBounded: a client that never stops sending holds a lingering
// close for LingerBytes at most, well before LingerTime here.
func TestLingerIsBounded(t *testing.T) {
	client, server := testnet.TCPPair(t)
	defer client.Close()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		chunk := make([]byte, 64<<10)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := client.Write(chunk); err != nil {
				return
			}
		}
	}()
	cc := Wrap(server)
	cc.Linger()
	done := make(chan struct{})
	go func() { cc.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * LingerTime):
		t.Fatal("a lingering close did not end")
	}
	// The connection is closed: the client's writes fail soon.
	client.SetWriteDeadline(time.Now().Add(5 * time.Second))
	for {
		if _, err := client.Write(make([]byte, 64<<10)); err != nil {
			break
		}
	}
}

// Fresh counts the accepted connections that have not begun their first
// request: Started (on the connection, or on one wrapping it) and Close
// each take one off, once.
func TestFreshCountsConnectionsBeforeTheirFirstRequest(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := NewWith(raw, Options{Max: 100})
	defer ln.Close()
	accept := func() net.Conn {
		c, err := net.Dial("tcp", raw.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	a, b, c := accept(), accept(), accept()
	if n := ln.Fresh(); n != 3 {
		t.Fatalf("Fresh = %d after three accepts, want 3", n)
	}
	Started(a)
	Started(a)
	if n := ln.Fresh(); n != 2 {
		t.Fatalf("Fresh = %d after one connection started (twice), want 2", n)
	}
	Started(tls.Server(b, &tls.Config{})) // as the server gets a TLS connection
	if n := ln.Fresh(); n != 1 {
		t.Fatalf("Fresh = %d after a wrapped connection started, want 1", n)
	}
	c.Close()
	a.Close()
	if n := ln.Fresh(); n != 0 {
		t.Fatalf("Fresh = %d after the last fresh one closed, want 0", n)
	}
	Started(c)
	if n := ln.Fresh(); n != 0 {
		t.Fatalf("Fresh = %d after a closed connection started, want 0", n)
	}
}

// A request reads its peer's address from the Conn, through a TLS
// wrapper too, as the kernel reported it at accept: an IPv4-mapped IPv6
// address unmapped, the same address the per-IP count keys on.
func TestPeerIsReadOnceAtAccept(t *testing.T) {
	for _, tc := range []struct{ network, listen, dial, want string }{
		{"tcp4", "127.0.0.1:0", "127.0.0.1", "127.0.0.1"},
		{"tcp", "[::]:0", "127.0.0.1", "127.0.0.1"}, // accepted as ::ffff:127.0.0.1
		{"tcp6", "[::1]:0", "::1", "::1"},
	} {
		raw, err := net.Listen(tc.network, tc.listen)
		if err != nil {
			t.Logf("%s %s: %v (skipped)", tc.network, tc.listen, err)
			continue
		}
		ln := NewWith(raw, Options{Max: 10, PerIP: 10})
		_, port, _ := net.SplitHostPort(raw.Addr().String())
		c, err := net.Dial("tcp", net.JoinHostPort(tc.dial, port))
		if err != nil {
			t.Fatal(err)
		}
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		for _, conn := range []net.Conn{s, tls.Server(s, &tls.Config{})} {
			ip, ok := PeerOf(conn)
			if !ok || ip.String() != tc.want || PeerIPOf(s) != tc.want || PeerIPOf(conn) != tc.want {
				t.Errorf("%s: PeerOf(%T) = %v, %v; PeerIPOf %q, %q; want %s", tc.listen, conn, ip, ok, PeerIPOf(s), PeerIPOf(conn), tc.want)
			}
		}
		ln.mu.Lock()
		counted := ln.perIP[s.(*Conn).peer]
		ln.mu.Unlock()
		if counted != 1 {
			t.Errorf("%s: perIP[%s] = %d, want 1", tc.listen, tc.want, counted)
		}
		c.Close()
		s.Close()
		ln.Close()
	}
	if _, ok := PeerOf(fakeNetConn{}); ok || PeerIPOf(fakeNetConn{}) != "" {
		t.Error("PeerOf or PeerIPOf found a peer on a connection that is not a Conn")
	}
}

type fakeNetConn struct{ net.Conn }

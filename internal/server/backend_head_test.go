package server

// End-to-end tests of what levee accepts from a backend (docs/http.md,
// "What a backend may send"): a response head that two readers could read
// two ways is a 502, never a forwarded or split header; interim responses
// are bounded; an upgrade the backend does not take is an ordinary
// response, streamed, never buffered whole.

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// A head that fasthttp (or Go's parser) would read leniently is refused
// whole: the client gets levee's 502, and no field of it.
func TestBackendHeadThatReadsTwoWaysIs502(t *testing.T) {
	many := strings.Repeat("X-Many: 1\r\n", 101)
	for _, c := range []struct{ name, head string }{
		{"space before the colon", "HTTP/1.1 200 OK\r\nContent-Length : 0\r\nInjected: yes\r\n\r\n"},
		{"space inside a name", "HTTP/1.1 200 OK\r\nX Bad: 1\r\nInjected: yes\r\nContent-Length: 0\r\n\r\n"},
		{"bare LF in a value", "HTTP/1.1 200 OK\r\nX-A: 1\nInjected: yes\r\nContent-Length: 0\r\n\r\n"},
		{"bare LF ending the head", "HTTP/1.1 200 OK\nInjected: yes\nContent-Length: 0\n\n"},
		{"bare CR in a value", "HTTP/1.1 200 OK\r\nX-A: 1\rInjected: yes\r\nContent-Length: 0\r\n\r\n"},
		{"NUL in a value", "HTTP/1.1 200 OK\r\nX-A: 1\x00Injected: yes\r\nContent-Length: 0\r\n\r\n"},
		{"obs-fold", "HTTP/1.1 200 OK\r\nX-A: 1\r\n Injected: yes\r\nContent-Length: 0\r\n\r\n"},
		{"two lengths", "HTTP/1.1 200 OK\r\nInjected: yes\r\nContent-Length: 0\r\nContent-Length: 5\r\n\r\nhello"},
		{"length and chunked", "HTTP/1.1 200 OK\r\nInjected: yes\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"},
		{"more than 100 fields", "HTTP/1.1 200 OK\r\nInjected: yes\r\n" + many + "Content-Length: 0\r\n\r\n"},
		{"larger than the buffer", "HTTP/1.1 200 OK\r\nInjected: yes\r\nX-Big: " + strings.Repeat("b", 5000) + "\r\nContent-Length: 0\r\n\r\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			be := startNaiveBackend(t, func(_, _ string) (string, string) { return c.head, "" }, 0)
			p := startProxy(t, photosApp(be.addr, "", ""))
			resp := p.get("photos.test", "/")
			body := readAll(t, resp)
			if resp.StatusCode != http.StatusBadGateway {
				t.Errorf("status %d (%q), want 502", resp.StatusCode, body)
			}
			if v := resp.Header.Get("Injected"); v != "" {
				t.Errorf("the client got a field of the refused head: Injected: %q", v)
			}
		})
	}
}

// A well-formed head with the forms a strict reader must still take
// (HTAB, obs-text, an empty value) passes.
func TestBackendHeadStrictButNotPicky(t *testing.T) {
	head := "HTTP/1.1 200 OK\r\nX-Tab: a\tb\r\nX-Text: caf\xe9\r\nX-Empty:\r\n" +
		"Content-Length: 2\r\n\r\nok"
	be := startNaiveBackend(t, func(_, _ string) (string, string) { return head, "" }, 0)
	p := startProxy(t, photosApp(be.addr, "", ""))
	resp := p.get("photos.test", "/")
	if body := readAll(t, resp); resp.StatusCode != http.StatusOK || body != "ok" {
		t.Fatalf("status %d %q, want 200 \"ok\"", resp.StatusCode, body)
	}
	if v := resp.Header.Get("X-Tab"); v != "a\tb" {
		t.Errorf("X-Tab %q", v)
	}
}

// Interim responses are skipped, at most 8 of them: a flood of them is a
// 502, not thousands of frames relayed to the client.
func TestInterimFloodIs502(t *testing.T) {
	for _, n := range []int{8, 9, 10_000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			interim := strings.Repeat("HTTP/1.1 102 Processing\r\n\r\n", n)
			be := startNaiveBackend(t, func(_, path string) (string, string) { return interim + lengthAnswer(path), "" }, 0)
			p := startProxy(t, photosApp(be.addr, "", ""))
			resp := p.get("photos.test", "/x")
			body := readAll(t, resp)
			want := http.StatusOK
			if n > 8 {
				want = http.StatusBadGateway
			}
			if resp.StatusCode != want || want == http.StatusOK && body != "/x" {
				t.Errorf("%d interim responses: status %d %q, want %d", n, resp.StatusCode, body, want)
			}
		})
	}
}

// scriptBackend answers each connection's first request head with script.
func scriptBackend(t testing.TB, script func(c net.Conn, br *bufio.Reader)) string {
	t.Helper()
	return serveBackend(t, func(c net.Conn, br *bufio.Reader) {
		if _, _, err := readNaiveRequest(br); err != nil {
			return
		}
		script(c, br)
	})
}

// serveBackend serves each connection accepted on a loopback listener with
// serve, which may read from br, on a goroutine of its own, under guard's
// deadline, and closes it after; the test's end closes the listener and
// waits for them.
func serveBackend(t testing.TB, serve func(c net.Conn, br *bufio.Reader)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(guard))
				serve(c, bufio.NewReader(c))
			})
		}
	})
	return ln.Addr().String()
}

// An upgrade the backend answers with a 200 and a large body is streamed
// like any response: levee's heap does not grow by the body's size.
func TestUpgradeAnsweredWithABodyStreams(t *testing.T) {
	skipOnH2C(t, "upgrades are HTTP/1.1's")
	const size = 64 << 20
	for _, framing := range []string{"length", "chunked", "close"} {
		t.Run(framing, func(t *testing.T) {
			be := scriptBackend(t, func(c net.Conn, _ *bufio.Reader) {
				bw := bufio.NewWriterSize(c, 64<<10)
				switch framing {
				case "length":
					fmt.Fprintf(bw, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", size)
				case "chunked":
					bw.WriteString("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
				default:
					bw.WriteString("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")
				}
				chunk := make([]byte, 32<<10)
				for i := range chunk {
					chunk[i] = 'a' + byte(i%26)
				}
				for sent := 0; sent < size; sent += len(chunk) {
					if framing == "chunked" {
						fmt.Fprintf(bw, "%x\r\n", len(chunk))
					}
					if _, err := bw.Write(chunk); err != nil {
						return
					}
					if framing == "chunked" {
						bw.WriteString("\r\n")
					}
				}
				if framing == "chunked" {
					bw.WriteString("0\r\n\r\n")
				}
				bw.Flush()
			})
			p := startProxy(t, photosApp(be, "", ""))
			base := heapInUse()
			br, _ := rawExchange(t, strings.TrimPrefix(p.URL, "http://"), upgradeRequest)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d, want the backend's 200", resp.StatusCode)
			}
			// Read half, then look at the heap: a body buffered whole is
			// all in it by now.
			n, err := io.CopyN(io.Discard, resp.Body, size/2)
			if err != nil {
				t.Fatalf("read %d bytes: %v", n, err)
			}
			if grew := heapInUse() - base; grew > size/4 {
				t.Errorf("heap grew by %d MiB while a %d MiB answer to an upgrade streamed: it is buffered",
					grew>>20, size>>20)
			}
			rest, err := io.Copy(io.Discard, resp.Body)
			if err != nil || n+rest != size {
				t.Errorf("body: %d bytes (%v), want %d", n+rest, err, size)
			}
		})
	}
}

// heapInUse is the heap in use after a collection, in bytes.
func heapInUse() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse)
}

// On the upgrade path too, a 100 Continue is interim: the answer after it
// is the one the client gets, whether it switches or not; and a flood of
// them is a 502.
func TestUpgradeSkipsInterimResponses(t *testing.T) {
	skipOnH2C(t, "upgrades are HTTP/1.1's")
	t.Run("then 200", func(t *testing.T) {
		be := scriptBackend(t, func(c net.Conn, _ *bufio.Reader) {
			io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nplain")
		})
		p := startProxy(t, photosApp(be, "", ""))
		br, _ := rawExchange(t, strings.TrimPrefix(p.URL, "http://"), upgradeRequest)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		if body := readAll(t, resp); resp.StatusCode != http.StatusOK || body != "plain" {
			t.Errorf("status %d %q, want 200 \"plain\"", resp.StatusCode, body)
		}
	})
	t.Run("then 101", func(t *testing.T) {
		be := scriptBackend(t, func(c net.Conn, br *bufio.Reader) {
			io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 101 Switching Protocols\r\n"+
				"Connection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
			line, err := br.ReadString('\n')
			if err == nil {
				io.WriteString(c, "echo: "+line)
			}
		})
		p := startProxy(t, photosApp(be, "", ""))
		br, conn := rawExchange(t, strings.TrimPrefix(p.URL, "http://"), upgradeRequest)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("status %d, want 101 after the 100", resp.StatusCode)
		}
		io.WriteString(conn, "hi\n")
		if line, err := br.ReadString('\n'); err != nil || line != "echo: hi\n" {
			t.Errorf("through the tunnel: %q (%v)", line, err)
		}
	})
	t.Run("flood", func(t *testing.T) {
		be := scriptBackend(t, func(c net.Conn, _ *bufio.Reader) {
			io.WriteString(c, strings.Repeat("HTTP/1.1 100 Continue\r\n\r\n", 10_000)+
				"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
		})
		p := startProxy(t, photosApp(be, "", ""))
		br, _ := rawExchange(t, strings.TrimPrefix(p.URL, "http://"), upgradeRequest)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		if readAll(t, resp); resp.StatusCode != http.StatusBadGateway {
			t.Errorf("status %d, want 502", resp.StatusCode)
		}
	})
	t.Run("bad head", func(t *testing.T) {
		be := scriptBackend(t, func(c net.Conn, _ *bufio.Reader) {
			io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\nInjected: yes\r\n\r\n")
		})
		p := startProxy(t, photosApp(be, "", ""))
		br, _ := rawExchange(t, strings.TrimPrefix(p.URL, "http://"), upgradeRequest)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		if readAll(t, resp); resp.StatusCode != http.StatusBadGateway || resp.Header.Get("Injected") != "" {
			t.Errorf("status %d (Injected %q), want 502", resp.StatusCode, resp.Header.Get("Injected"))
		}
	})
}

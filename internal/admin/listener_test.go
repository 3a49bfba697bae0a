package admin

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"testing"
	"time"
)

// TestConnectionCap opens the cap's worth of idle keep-alive connections,
// then more: the extra are closed at once, and a freed place is reused.
func TestConnectionCap(t *testing.T) {
	const max, extra = 4, 3
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h, _ := adminWith(Options{Addr: ln.Addr().String()})
	srv := NewServer(h, nil)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(LimitListener(ln, max)) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	addr := ln.Addr().String()
	// get sends one keep-alive request on c and reads the answer.
	get := func(c net.Conn) error {
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: " + addr + "\r\n\r\n")); err != nil {
			return err
		}
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return err
		}
		res.Body.Close()
		if res.StatusCode != 200 {
			return errors.New(res.Status)
		}
		return nil
	}
	dial := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	held := make([]net.Conn, max)
	for i := range held {
		held[i] = dial()
		if err := get(held[i]); err != nil {
			t.Fatalf("conn %d of %d: %v", i+1, max, err)
		}
	}
	for i := range extra {
		c := dial()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err := c.Read(make([]byte, 1))
		var ne net.Error
		if err == nil || errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("extra conn %d: read = %v, want it closed by the server", i+1, err)
		}
	}
	for i, c := range held {
		if err := get(c); err != nil {
			t.Fatalf("held conn %d after the extra ones: %v", i+1, err)
		}
	}
	// A closed conn frees its place, once the server has seen it close.
	held[0].Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for {
		if err := get(dial()); err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("no conn served within 5s after one of the cap was closed")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestServerBounds(t *testing.T) {
	srv := NewServer(http.NotFoundHandler(), nil)
	if srv.IdleTimeout <= 0 || srv.ReadHeaderTimeout <= 0 || srv.ReadTimeout <= 0 {
		t.Fatalf("admin server lacks a bound: idle %v, read header %v, read %v", srv.IdleTimeout, srv.ReadHeaderTimeout, srv.ReadTimeout)
	}
}

package sdnotify

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fakeSystemd listens where $NOTIFY_SOCKET would point.
func fakeSystemd(t *testing.T) (string, *net.UnixConn) {
	t.Helper()
	dir, err := os.MkdirTemp("", "sdn") // short: unix socket paths are limited to 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "notify")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return path, c
}

func recv(t *testing.T, c *net.UnixConn) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 4096)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("no notification: %v", err)
	}
	return string(buf[:n])
}

func TestMessages(t *testing.T) {
	path, c := fakeSystemd(t)
	t.Setenv("NOTIFY_SOCKET", path)
	n := FromEnv()
	if err := n.Ready("serving"); err != nil {
		t.Fatal(err)
	}
	if got := recv(t, c); got != "READY=1\nSTATUS=serving" {
		t.Errorf("ready: %q", got)
	}
	if err := n.Reloading(); err != nil {
		t.Fatal(err)
	}
	got := recv(t, c)
	usec, ok := strings.CutPrefix(got, "RELOADING=1\nMONOTONIC_USEC=")
	if v, err := strconv.ParseInt(usec, 10, 64); !ok || err != nil || v <= 0 {
		t.Errorf("reloading: %q, want RELOADING=1 and a positive MONOTONIC_USEC", got)
	}
	if err := n.Stopping(); err != nil {
		t.Fatal(err)
	}
	if got := recv(t, c); !strings.HasPrefix(got, "STOPPING=1") {
		t.Errorf("stopping: %q", got)
	}
}

func TestWithoutSystemdNothingIsSent(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	n := FromEnv()
	if n != nil {
		t.Fatalf("FromEnv without NOTIFY_SOCKET = %v, want nil", n)
	}
	if err := n.Ready("x"); err != nil {
		t.Errorf("nil Notifier: %v", err)
	}
}

func TestAbstractAddress(t *testing.T) {
	if n := New("@levee/notify"); n.addr.Name != "\x00levee/notify" {
		t.Errorf("abstract address %q", n.addr.Name)
	}
}

func TestMonotonicMoves(t *testing.T) {
	a := monotonicUsec()
	time.Sleep(2 * time.Millisecond) // the clock under test is the real one
	if b := monotonicUsec(); b <= a {
		t.Errorf("CLOCK_MONOTONIC did not advance: %d then %d", a, b)
	}
}

// A systemd that does not read fills its socket's queue; a message past it
// gives up after sendTimeout instead of blocking levee's reload or shutdown.
func TestSendGivesUpOnAFullQueue(t *testing.T) {
	path, _ := fakeSystemd(t) // never read
	n := New(path)
	for i := range 100_000 { // the queue holds max_dgram_qlen messages (10 to 512)
		start := time.Now()
		err := n.Send("STATUS=" + strconv.Itoa(i))
		if err == nil {
			continue
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("message %d: %v; want a deadline error once the queue is full", i, err)
		}
		if d := time.Since(start); d < sendTimeout || d > sendTimeout+5*time.Second {
			t.Fatalf("message %d gave up after %v; want about %v", i, d, sendTimeout)
		}
		return
	}
	t.Fatal("100,000 messages to a socket nobody reads were all sent")
}

func TestMainPID(t *testing.T) {
	path, c := fakeSystemd(t)
	n := New(path)
	if err := n.MainPID(4242, "serving (upgraded)"); err != nil {
		t.Fatal(err)
	}
	if got := recv(t, c); got != "MAINPID=4242\nREADY=1\nSTATUS=serving (upgraded)" {
		t.Errorf("got %q", got)
	}
}

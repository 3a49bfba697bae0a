package forward

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// An idleBody passes bytes that keep coming, however long the body takes;
// a read that gets none within the timeout fails with errBodyIdle (never
// io.EOF, even when the closed body says so), and closes the body.
func TestIdleBodyEndsAStalledRead(t *testing.T) {
	const timeout = 50 * time.Millisecond
	pr, pw := io.Pipe()
	b := newIdleBody(pr, timeout)
	defer b.Close()
	go func() {
		for range 4 { // each within the timeout of the last; all four take longer
			pw.Write([]byte("x"))
			time.Sleep(timeout / 2)
		}
	}()
	buf := make([]byte, 8)
	for i := range 4 {
		if n, err := b.Read(buf); n != 1 || err != nil {
			t.Fatalf("read %d: %d bytes, %v", i, n, err)
		}
	}
	start := time.Now()
	if _, err := b.Read(buf); !errors.Is(err, errBodyIdle) {
		t.Fatalf("stalled read: %v, want errBodyIdle", err)
	}
	// The margin only catches a read the timeout did not end.
	if took := time.Since(start); took > timeout+3*time.Second {
		t.Errorf("the stalled read took %v, want about %v", took, timeout)
	}
	if _, err := pw.Write([]byte("late")); !errors.Is(err, io.ErrClosedPipe) {
		t.Errorf("the backend's body is still open after the stall: write %v", err)
	}
}

// Upgrades and bodiless responses are left alone: ReverseProxy needs a
// 101's body to be the connection itself.
func TestBoundBodyReadsSkipsUpgrades(t *testing.T) {
	rwc := struct {
		io.ReadWriteCloser
	}{}
	for _, res := range []*http.Response{
		{StatusCode: http.StatusSwitchingProtocols, Body: rwc},
		{StatusCode: http.StatusNoContent, Body: http.NoBody},
	} {
		before := res.Body
		boundBodyReads(res, time.Second)
		if res.Body != before {
			t.Errorf("status %d: body wrapped", res.StatusCode)
		}
	}
	res := &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader("ok"))}
	boundBodyReads(res, time.Second)
	if _, ok := res.Body.(*idleBody); !ok {
		t.Error("a 200's body is not bounded")
	}
}

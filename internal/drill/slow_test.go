package drill

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/leaktest"
)

// waitFor polls cond every millisecond until it holds, or fails after waitTimeout.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	leaktest.WaitFor(t, waitTimeout, what, cond)
}

// holding is an edge that holds every slow connection: no timeouts, the
// body read to its end, a large response written to its end. It counts
// its open connections.
func holding(t *testing.T) (url string, open *atomic.Int64, bodies *atomic.Int64) {
	open, bodies = new(atomic.Int64), new(atomic.Int64)
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			buf := make([]byte, 512)
			for {
				n, err := r.Body.Read(buf)
				bodies.Add(int64(n))
				if err != nil {
					return
				}
			}
		}
		_, _ = w.Write(make([]byte, 1<<20))
	}))
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			open.Add(1)
		case http.StateClosed, http.StateHijacked:
			open.Add(-1)
		}
	}
	s.Start()
	t.Cleanup(s.Close)
	return s.URL, open, bodies
}

func TestSlowAttackHoldsEveryConnectionUntilStopped(t *testing.T) {
	url, open, bodies := holding(t)
	run, err := SlowAttack{Target: url, Host: "slow.test", Slowloris: 4, SlowBody: 4, SlowRead: 4,
		Interval: 5 * time.Millisecond, BodySizes: []int64{1 << 20}}.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { run.Stop() }) // before the edge's Close, which waits for its connections
	// each body's first 128 KiB come at once, the rest a chunk per interval
	waitFor(t, "the edge has all 12 connections and the bodies' heads", func() bool {
		return open.Load() == 12 && bodies.Load() > 4*slowBodyHead
	})
	waitFor(t, "slow readers read", func() bool { return run.Stats().SlowRead.BytesRead > 0 })
	st := run.Stop()
	for _, k := range st.Kinds() {
		if k.Conns != 4 || k.Opened != 4 || k.Refused != 0 || k.Cut != 0 || k.Completed != 0 || k.Open != 4 {
			t.Errorf("%s: %+v; want 4 opened and held to the end, none refused, cut or completed", k.Kind, k)
		}
		if k.BytesSent == 0 {
			t.Errorf("%s sent nothing", k.Kind)
		}
	}
	// the slow reader reads at most a chunk per interval: far from the whole 1 MiB
	if got := st.SlowRead.BytesRead; got >= 1<<20 {
		t.Errorf("slow readers read %d bytes: not slow", got)
	}
	if got := st.SlowBody.BytesSent; got >= 4*(slowBodyHead+64<<10) {
		t.Errorf("slow bodies sent %d bytes: not slow after their heads", got)
	}
	waitFor(t, "Stop has closed every connection", func() bool { return open.Load() == 0 })
	if again := run.Stop(); again.SlowBody.Opened != 4 {
		t.Errorf("a second Stop: %+v", again.SlowBody)
	}
}

// cutting is a raw TCP edge that lets each connection send its request's
// start, then after `after` calls end on it (which answers or closes it).
func cutting(t *testing.T, after time.Duration, end func(c *net.TCPConn)) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 64)
				_, _ = c.Read(buf)
				time.Sleep(after) // the edge's timeout; the attack must see what follows it
				end(c.(*net.TCPConn))
			}()
		}
	}()
	return ln.Addr().String()
}

func TestSlowAttackCountsWhatTheEdgeCuts(t *testing.T) {
	const after = 50 * time.Millisecond
	for _, c := range []struct {
		name   string
		attack SlowAttack
		end    func(c *net.TCPConn)
		kind   func(SlowStats) SlowKindStats
		status int
	}{
		{"slowloris answered 408", SlowAttack{Slowloris: 3}, func(c *net.TCPConn) {
			_, _ = io.WriteString(c, "HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
			// a graceful close: closing with unread bytes would reset the
			// connection, and a reset may discard the answer before it is read
			_ = c.CloseWrite()
			_ = c.SetReadDeadline(time.Now().Add(waitTimeout))
			_, _ = io.Copy(io.Discard, c)
		}, func(s SlowStats) SlowKindStats { return s.Slowloris }, 408},
		{"slow-body closed", SlowAttack{SlowBody: 3}, func(c *net.TCPConn) {},
			func(s SlowStats) SlowKindStats { return s.SlowBody }, 0},
		{"slow-read reset behind queued bytes", SlowAttack{SlowRead: 3}, func(c *net.TCPConn) {
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 1048576\r\n\r\n")
			_ = c.SetWriteDeadline(time.Now().Add(10 * time.Millisecond))
			_, _ = c.Write(make([]byte, 1<<20)) // fills the buffers, then times out
			_ = c.SetLinger(0)
		}, func(s SlowStats) SlowKindStats { return s.SlowRead }, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := c.attack
			a.Target, a.Interval = cutting(t, after, c.end), 5*time.Millisecond
			run, err := a.Start(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { run.Stop() })
			waitFor(t, "the edge has cut all 3", func() bool { return c.kind(run.Stats()).Cut == 3 })
			k := c.kind(run.Stop())
			if k.Opened != 3 || k.Open != 0 || k.Completed != 0 || k.CutMin < after || k.CutMax > waitTimeout {
				t.Errorf("%+v; want 3 opened, all cut after at least %v", k, after)
			}
			if c.status != 0 && k.Statuses[c.status] != 3 {
				t.Errorf("statuses %v; want %d x3", k.Statuses, c.status)
			}
		})
	}
}

func TestSlowAttackRefusedAndRedial(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close() // nothing listens there now
	run, err := SlowAttack{Target: "http://" + dead, SlowBody: 5}.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st := run.Stop().SlowBody; st.Refused != 5 || st.Opened != 0 {
		t.Errorf("against a closed port: %+v; want 5 refused", st)
	}

	// an edge that closes every connection at accept: with Redial the attack
	// comes back, each time counted
	closer := cutting(t, 0, func(*net.TCPConn) {})
	run, err = SlowAttack{Target: closer, Slowloris: 2, Redial: true, Interval: time.Millisecond}.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { run.Stop() })
	waitFor(t, "the attack redials", func() bool { return run.Stats().Slowloris.Cut >= 6 })
	if st := run.Stop().Slowloris; st.Opened < 6 || st.Opened > st.Cut+2 {
		t.Errorf("redialling: %+v; want every opening but the last 2 cut", st)
	}
}

func TestSlowAttackRefusesBadInput(t *testing.T) {
	for _, a := range []SlowAttack{
		{Target: "127.0.0.1:1"},
		{Target: "127.0.0.1:1", SlowBody: -1, Slowloris: 2},
		{Target: "https://127.0.0.1:1", SlowBody: 1},
		{Target: "no-port", SlowBody: 1},
		{Target: "127.0.0.1:1", SlowBody: 1, BodySizes: []int64{0}},
		{Target: "127.0.0.1:1", SlowBody: 1, Source: "not-an-ip"},
	} {
		if _, err := a.Start(context.Background()); err == nil || !strings.HasPrefix(err.Error(), "drill: ") {
			t.Errorf("%+v: %v; want a drill error", a, err)
		}
	}
	if err := EnsureFiles(1 << 40); err == nil && runtime.GOOS == "linux" {
		t.Error("EnsureFiles(2^40): no error")
	}
}

package drill

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/clock"
)

// waitTimeout bounds every wait in these tests; passing never depends on it.
const waitTimeout = 10 * time.Second

func TestScheduleSteps(t *testing.T) {
	s, err := NewSchedule([]Step{{Rate: 100, For: time.Second}, {Rate: 1000, For: 500 * time.Millisecond}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if s.Total() != 600 || s.Span() != 1500*time.Millisecond {
		t.Fatalf("total %d span %v; want 600, 1.5s", s.Total(), s.Span())
	}
	for i, want := range map[int64]time.Duration{0: 0, 1: 10 * time.Millisecond, 99: 990 * time.Millisecond,
		100: time.Second, 101: time.Second + time.Millisecond, 599: 1499 * time.Millisecond} {
		if got := s.Offset(i); got != want {
			t.Errorf("Offset(%d) = %v; want %v", i, got, want)
		}
	}
	// offsets never drift: the k-th of a step is k/rate from its start
	s, _ = Constant(3, time.Second, 0)
	if s.Offset(1) != 333333333 || s.Offset(2) != 666666667 {
		t.Fatalf("offsets %v %v", s.Offset(1), s.Offset(2))
	}
	if s, _ = Constant(1000, time.Second, 7); s.Total() != 7 {
		t.Fatalf("max requests: total %d; want 7", s.Total())
	}
	for _, bad := range [][]Step{nil, {{Rate: 0, For: time.Second}}, {{Rate: 5, For: 0}}} {
		if _, err := NewSchedule(bad, 0); err == nil {
			t.Errorf("NewSchedule(%v): want an error", bad)
		}
	}
}

func TestParseRateAndSteps(t *testing.T) {
	for in, want := range map[string]float64{"750": 750, "750/s": 750, "1.5k/s": 1500, "600/m": 10} {
		if got, err := ParseRate(in); err != nil || got != want {
			t.Errorf("ParseRate(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "-1/s", "x", "5/h", "2000k"} {
		if _, err := ParseRate(in); err == nil {
			t.Errorf("ParseRate(%q): want an error", in)
		}
	}
	steps, err := ParseSteps("100/s:2s, 500/s", 3*time.Second)
	if err != nil || len(steps) != 2 || steps[0] != (Step{100, 2 * time.Second}) || steps[1] != (Step{500, 3 * time.Second}) {
		t.Fatalf("ParseSteps = %v, %v", steps, err)
	}
	if _, err := ParseSteps("100/s:soon", time.Second); err == nil {
		t.Fatal("ParseSteps with a bad duration: want an error")
	}
}

// blockingDoer answers 200 once released, telling the test each time a request starts.
type blockingDoer struct {
	started chan int64
	release chan struct{}
}

func (b *blockingDoer) Do(_ context.Context, r *Request) Response {
	i, _ := strconv.ParseInt(strings.TrimPrefix(r.Path, "/"), 10, 64)
	b.started <- i
	<-b.release
	return Response{Status: 200}
}

// With a fake clock: requests go out at their intended times, at most
// MaxInFlight at once; the rest overflow (counted, never queued), and a
// request's latency runs from its intended time, not from when a slot freed.
func TestRunOpenLoopBoundedInFlight(t *testing.T) {
	start := time.Now() // request deadlines are real contexts: keep them in the future
	clk := clock.NewFake(start)
	sched, _ := Constant(100, 100*time.Millisecond, 0) // 10 requests, 10 ms apart
	d := &blockingDoer{started: make(chan int64, 10), release: make(chan struct{})}
	var live Live
	done := make(chan *Result, 1)
	go func() {
		done <- Run(context.Background(), clk, Plan{Name: "t", Schedule: sched, MaxInFlight: 2, Timeout: time.Minute,
			Make: func(i int64) Request { return Request{Path: "/" + strconv.FormatInt(i, 10)} }}, d, &live)
	}()
	deadline := time.After(waitTimeout)
	for i := 1; i < 10; i++ { // request 0 is due at once; each later one waits on a timer
		select {
		case <-clk.TimerCreated():
		case <-deadline:
			t.Fatalf("the dispatcher did not wait for request %d", i)
		}
		clk.Advance(10 * time.Millisecond)
	}
	for range 2 {
		select {
		case i := <-d.started:
			if i > 1 {
				t.Fatalf("request %d started; only 0 and 1 fit in 2 slots", i)
			}
		case <-deadline:
			t.Fatal("requests 0 and 1 did not start")
		}
	}
	for live.Due.Load() < 10 { // every request has been dispatched (or overflowed)
		select {
		case <-deadline:
			t.Fatalf("dispatched %d of 10", live.Due.Load())
		case <-time.After(time.Millisecond):
		}
	}
	clk.Advance(10 * time.Millisecond) // now = start + 100 ms
	close(d.release)
	var res *Result
	select {
	case res = <-done:
	case <-deadline:
		t.Fatal("Run did not return")
	}
	if res.Scheduled != 10 || res.Sent != 2 || res.Overflow != 8 || res.OK != 2 || res.Failed() != 8 {
		t.Fatalf("scheduled %d sent %d overflow %d ok %d failed %d; want 10 2 8 2 8", res.Scheduled, res.Sent, res.Overflow, res.OK, res.Failed())
	}
	// request 0 was due at 0 and answered at 100 ms; request 1 due at 10 ms
	// (a quantile is the upper bound of the value's bucket)
	_, hi90 := bucketBounds(bucketOf(int64(90 * time.Millisecond)))
	if res.OKLat.Max() != 100*time.Millisecond || res.OKLat.Quantile(0.5) != time.Duration(hi90) {
		t.Fatalf("latencies max %v p50 %v; want 100ms, 90ms's bucket (%v)", res.OKLat.Max(), res.OKLat.Quantile(0.5), time.Duration(hi90))
	}
	if res.Window != 100*time.Millisecond { // dispatched on time: the scheduled span
		t.Fatalf("window %v; want 100ms", res.Window)
	}
	if res.Elapsed != 100*time.Millisecond || res.Goodput() != 20 { // the last answer came at 100 ms
		t.Fatalf("elapsed %v, goodput %v; want 100ms, 2 answered in it", res.Elapsed, res.Goodput())
	}
	if live.Done.Load() != 10 || live.OK.Load() != 2 || live.Failed.Load() != 8 {
		t.Fatalf("live done %d ok %d failed %d", live.Done.Load(), live.OK.Load(), live.Failed.Load())
	}
}

func TestRunCountsAgainstAServer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/"))
		if r.Host != "tenant.test" || r.Header.Get("X-Client-Id") == "" {
			w.WriteHeader(400)
			return
		}
		switch n % 4 {
		case 0, 1:
			w.WriteHeader(200)
		case 2:
			w.Header().Set("Retry-After", "1")
			w.Header().Set("Levee-Reject", "rate")
			w.WriteHeader(429)
		case 3:
			w.WriteHeader(503) // no Retry-After: not a clear refusal
		}
	}))
	defer srv.Close()
	d := NewHTTPDoer(srv.URL, 16)
	defer d.Close()
	sched, _ := Constant(400, 100*time.Millisecond, 0)
	res := Run(context.Background(), nil, Plan{Name: "t", Schedule: sched, MaxInFlight: 40, Timeout: waitTimeout,
		Make: func(i int64) Request {
			return Request{Path: "/" + strconv.FormatInt(i, 10), Host: "tenant.test", Header: http.Header{"X-Client-Id": {"c"}}}
		}}, d, nil)
	if res.Sent != 40 || res.OK != 20 || res.Non2xx != 20 || res.ByStatus[429] != 10 || res.ByStatus[503] != 10 {
		t.Fatalf("sent %d ok %d non2xx %d codes %v; want 40 20 20, 10×429, 10×503", res.Sent, res.OK, res.Non2xx, res.ByStatus)
	}
	if res.Refusals != 10 || res.RetryAfter != 10 || res.Reasons["rate"] != 10 || res.All.Count() != 40 {
		t.Fatalf("refusals %d retry-after %d reasons %v latencies %d", res.Refusals, res.RetryAfter, res.Reasons, res.All.Count())
	}
	// 20 OK over the 100 ms schedule, or over a longer span if the dispatcher fell behind
	if res.Window < 100*time.Millisecond || res.Rate(res.OK) > 200 || res.Rate(res.OK) != 20/res.Window.Seconds() {
		t.Fatalf("window %v, admitted rate %v; want >= 100ms, 20 over it", res.Window, res.Rate(res.OK))
	}
}

func TestRunOverflowAgainstAStalledServer(t *testing.T) {
	release := make(chan struct{})
	var entered atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	d := NewHTTPDoer(srv.URL, 5)
	defer d.Close()
	sched, _ := Constant(1000, 50*time.Millisecond, 0)
	var live Live
	done := make(chan *Result, 1)
	go func() {
		done <- Run(context.Background(), nil, Plan{Name: "t", Schedule: sched, MaxInFlight: 5, Timeout: time.Minute,
			Make: func(int64) Request { return Request{Path: "/"} }}, d, &live)
	}()
	deadline := time.After(waitTimeout)
	for live.Due.Load() < 50 || entered.Load() < 5 {
		select {
		case <-deadline:
			t.Fatalf("due %d entered %d", live.Due.Load(), entered.Load())
		case <-time.After(time.Millisecond):
		}
	}
	close(release)
	res := <-done
	if res.Sent != 5 || res.Overflow != 45 || res.OK != 5 || entered.Load() != 5 {
		t.Fatalf("sent %d overflow %d ok %d entered %d; want 5 45 5 5", res.Sent, res.Overflow, res.OK, entered.Load())
	}
}

// A body cut short of its Content-Length is a truncated answer, not a
// success; a connection nothing listens for is refused; a Fresh request
// does not reuse the kept-alive connection.
func TestHTTPDoerTellsFailuresApart(t *testing.T) {
	for name, mk := range map[string]func(base string, conns int) closingDoer{
		"net/http": func(base string, conns int) closingDoer { return NewHTTPDoer(base, conns) },
		"raw": func(base string, conns int) closingDoer {
			d, err := NewRawDoer(base, conns)
			if err != nil {
				t.Fatal(err)
			}
			return d
		},
	} {
		t.Run(name, func(t *testing.T) { testDoerTellsFailuresApart(t, mk) })
	}
}

func testDoerTellsFailuresApart(t *testing.T, newDoer func(base string, conns int) closingDoer) {
	var conns atomic.Int64
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/short" {
			w.Header().Set("Content-Length", "100")
			_, _ = w.Write([]byte("only ten.."))
			if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
				c.Close()
			}
			return
		}
		_, _ = w.Write([]byte("whole"))
	}))
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	s.Start()
	defer s.Close()
	d := newDoer(s.URL, 4)
	defer d.Close()
	ctx := context.Background()
	res := newResult("t", time.Second)
	for _, r := range []Request{{Path: "/short"}, {Path: "/"}, {Path: "/"}, {Path: "/", Fresh: true}} {
		res.record(d.Do(ctx, &r), time.Millisecond, time.Now())
	}
	if res.Truncated != 1 || res.OK != 3 || res.Resets != 0 {
		t.Fatalf("truncated %d, ok %d, resets %d; want 1, 3, 0", res.Truncated, res.OK, res.Resets)
	}
	// the truncated answer's connection is gone: one more for the two
	// kept-alive requests, one for the fresh one
	if n := conns.Load(); n != 3 {
		t.Fatalf("%d connections; want 3 (the cut one, one kept alive, one fresh)", n)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	closed := newDoer("http://"+addr, 1)
	defer closed.Close()
	res.record(closed.Do(ctx, &Request{Path: "/"}), time.Millisecond, time.Now())
	if res.Refused != 1 {
		t.Fatalf("refused %d; want 1", res.Refused)
	}
}

// The raw client reads what the drills grade from an answer (status,
// Retry-After, Levee-Reject, Drill-Backend), a chunked body, interim
// answers, and a body that ends at the close; it sends a GET again, once,
// when the server closed the kept-alive connection it went out on before
// answering, but never a fresh connection's request.
func TestRawDoerReadsAnswers(t *testing.T) {
	var arrived atomic.Int64
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.Add(1)
		switch r.URL.Path {
		case "/limited":
			w.Header().Set("Retry-After", "1")
			w.Header().Set("Levee-Reject", "rate")
			w.WriteHeader(http.StatusTooManyRequests)
		case "/chunked":
			w.Header().Set(backendHeader, "b1")
			for range 3 {
				io.WriteString(w, "part ")
				w.(http.Flusher).Flush()
			}
		case "/until-close":
			c, bw, _ := http.NewResponseController(w).Hijack()
			bw.WriteString("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.0 200 OK\r\n\r\nthe body ends at the close")
			bw.Flush()
			c.Close()
		case "/drop":
			c, _, _ := http.NewResponseController(w).Hijack()
			c.Close()
		default:
			io.WriteString(w, "whole")
		}
	}))
	defer s.Close()
	d, err := NewRawDoer(s.URL, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx := context.Background()
	if r := d.Do(ctx, &Request{Path: "/limited", Host: "a.test"}); r.Err != nil || r.Status != 429 || !r.RetryAfter || r.Reject != "rate" {
		t.Errorf("/limited: %+v; want 429 with Retry-After and Levee-Reject: rate", r)
	}
	if r := d.Do(ctx, &Request{Path: "/chunked"}); r.Err != nil || r.Status != 200 || r.Backend != "b1" {
		t.Errorf("/chunked: %+v; want 200 from b1", r)
	}
	if r := d.Do(ctx, &Request{Path: "/until-close"}); r.Err != nil || r.Status != 200 {
		t.Errorf("/until-close: %+v; want 200", r)
	}
	if r := d.Do(ctx, &Request{Path: "/"}); r.Err != nil || r.Status != 200 {
		t.Fatalf("/: %+v", r)
	}
	// A kept-alive connection is idle now; its next request is dropped
	// once, then sent again on a new connection, dropped again: a reset.
	arrived.Store(0)
	if r := d.Do(ctx, &Request{Path: "/drop"}); r.Err == nil || !isReset(r.Err) || arrived.Load() != 2 {
		t.Errorf("/drop kept alive: %+v after %d arrivals; want a reset after 2", r, arrived.Load())
	}
	arrived.Store(0)
	if r := d.Do(ctx, &Request{Path: "/drop", Fresh: true}); r.Err == nil || !isReset(r.Err) || arrived.Load() != 1 {
		t.Errorf("/drop fresh: %+v after %d arrivals; want a reset after 1", r, arrived.Load())
	}
	if _, err := NewRawDoer("https://127.0.0.1:1", 1); err == nil {
		t.Error("NewRawDoer took an https:// target")
	}
}

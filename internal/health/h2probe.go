package health

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"golang.org/x/net/http2/hpack"

	"github.com/leveeproxy/levee/internal/h2"
)

// H2Prober probes over HTTP/2, as the app's leg reaches its backends: h2c
// with prior knowledge, or h2 on TLS (ALPN h2) with the leg's TLS client.
// It speaks through levee's own HTTP/2 client (h2.ClientConn), one
// connection per backend, kept between probes: a backend that serves only
// HTTP/2 (a grpc-go server, an h2c-only service) is probed as the leg
// talks to it, and a probe costs no handshake. A connection that failed,
// or that the backend sent GOAWAY on, is closed and the next probe dials
// again; Close closes them all. Each probe (the dial included) is bounded
// by its context and the prober's timeout: when either ends, the
// connection is closed under the waits, so none outlives it.
//
// A probe is a GET of the path (healthy on 2xx or 3xx, as HTTPProber) or,
// with GRPC set, the standard gRPC health call (grpcprobe.go).
// Safe for concurrent use.
type H2Prober struct {
	o H2Options

	mu       sync.Mutex
	backends map[string]*h2Backend // by address; guarded by mu
	closed   bool                  // guarded by mu
}

// H2Options configure an H2Prober.
type H2Options struct {
	// Timeout bounds each probe, the dial included; ≤ 0 leaves only the
	// context's deadline.
	Timeout time.Duration
	// Idle closes a connection after this long without a probe (a backend
	// gone from the app's set); 0 is 90s, as HTTPProber's. Set it above
	// the interval between probes so that a connection serves them all.
	Idle time.Duration
	// TLS, when set, makes the leg h2: it returns the TLS client of the
	// backend at host, which must offer ALPN h2. Nil is h2c.
	TLS func(host string) *tls.Config
	// GRPC probes with grpc.health.v1.Health/Check for Service ("" is the
	// whole server) instead of a GET of the path.
	GRPC    bool
	Service string
}

// defaultIdle is how long a probe connection stays open without a probe.
const defaultIdle = 90 * time.Second

// h2Backend is one backend's probe connection. turn holds one token: a
// probe takes it for the connection's use, so a backend has at most one
// connection and one probe on it; a probe waits for it no longer than
// its own deadline.
type h2Backend struct {
	turn chan struct{}
	cc   *h2.ClientConn // nil: none open; read and set holding turn
}

var _ Prober = (*H2Prober)(nil)

// NewH2Prober returns an H2Prober; the caller closes it (Close).
func NewH2Prober(o H2Options) *H2Prober {
	if o.Idle <= 0 {
		o.Idle = defaultIdle
	}
	return &H2Prober{o: o, backends: map[string]*h2Backend{}}
}

// errProberClosed is a probe after Close.
var errProberClosed = errors.New("health: prober closed")

// Probe sends one request to addr: a GET of path, or the gRPC health call
// (path unused).
func (p *H2Prober) Probe(ctx context.Context, addr, path string) error {
	if p.o.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.o.Timeout)
		defer cancel()
	}
	b, err := p.backend(addr)
	if err != nil {
		return fmt.Errorf("health: probe %s: %w", addr, err)
	}
	select {
	case <-b.turn:
	case <-ctx.Done():
		return fmt.Errorf("health: probe %s: %w", addr, ctx.Err())
	}
	defer func() { b.turn <- struct{}{} }()
	if b.cc != nil && !b.cc.Usable() { // GOAWAY, failed, or idle: dial anew
		b.cc.Close()
		b.cc = nil
	}
	if b.cc == nil {
		if b.cc, err = p.dial(ctx, addr); err != nil {
			return probeError(ctx, addr, err)
		}
		if !p.keep(addr, b) { // Close ran meanwhile: it could not see this one
			b.cc.Close()
			b.cc = nil
			return fmt.Errorf("health: probe %s: %w", addr, errProberClosed)
		}
	}
	// The end of ctx closes the connection: the request's waits (and a
	// write the backend does not read) end with it.
	cc := b.cc
	stop := context.AfterFunc(ctx, func() { cc.Close() })
	err = p.exchange(ctx, cc, addr, path)
	if !stop() || err != nil && !answered(err) {
		// A connection that failed, or timed out under a request, is not
		// trusted with the next: closed, and dialled again.
		cc.Close()
		b.cc = nil
	}
	if err != nil {
		return probeError(ctx, addr, err)
	}
	return nil
}

// probeError is err of a probe of addr; a probe whose context ended says
// so first (the failure it caused, a closed connection, comes second). An
// answer that is not healthy is returned as it is: it names addr.
func probeError(ctx context.Context, addr string, err error) error {
	if answered(err) {
		return err
	}
	if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
		err = fmt.Errorf("%w (%w)", ctx.Err(), err)
	}
	return fmt.Errorf("health: probe %s: %w", addr, err)
}

// answered reports an error that is the backend's answer (a status, a
// gRPC status): the connection served it and may serve the next probe.
func answered(err error) bool {
	var se *StatusError
	var ge *GRPCError
	return errors.As(err, &se) || errors.As(err, &ge)
}

// backend is addr's entry, made on its first probe.
func (p *H2Prober) backend(addr string) (*h2Backend, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errProberClosed
	}
	b := p.backends[addr]
	if b == nil {
		b = &h2Backend{turn: make(chan struct{}, 1)}
		b.turn <- struct{}{}
		p.backends[addr] = b
	}
	return b, nil
}

// keep reports whether b may keep its new connection (the prober is not
// closed), and forgets the entries of other backends whose connection is
// gone (closed idle, or failed): a backend dropped from the set leaves
// nothing behind once its connection idles out.
func (p *H2Prober) keep(addr string, b *h2Backend) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for a, o := range p.backends {
		if a == addr {
			continue
		}
		select {
		case <-o.turn: // not in use: its connection can be looked at
			if o.cc == nil || !o.cc.Usable() {
				if o.cc != nil {
					o.cc.Close()
				}
				delete(p.backends, a)
			}
			o.turn <- struct{}{}
		default:
		}
	}
	return !p.closed
}

// Close closes every probe connection, waiting for the probes under way
// to end; later probes fail. It may be called more than once.
func (p *H2Prober) Close() {
	p.mu.Lock()
	p.closed = true
	backends := p.backends
	p.backends = map[string]*h2Backend{}
	p.mu.Unlock()
	for _, b := range backends {
		<-b.turn // a probe under way ends by its deadline
		if b.cc != nil {
			b.cc.Close()
			b.cc = nil
		}
		b.turn <- struct{}{}
	}
}

// dial opens one connection to addr within ctx: TCP, TLS with ALPN h2 for
// the h2 leg, then HTTP/2's preface and SETTINGS both ways.
func (p *H2Prober) dial(ctx context.Context, addr string) (*h2.ClientConn, error) {
	tcp, err := (&net.Dialer{KeepAlive: 30 * time.Second}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	// Until the ClientConn owns it, the end of ctx closes the socket: the
	// TLS handshake and the wait for SETTINGS end with it. (The function
	// has its own variable: nc becomes the TLS connection meanwhile.)
	stop := context.AfterFunc(ctx, func() { tcp.Close() })
	defer stop()
	nc := tcp
	if p.o.TLS != nil {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			host = addr
		}
		if nc, err = h2.ClientTLS(ctx, nc, p.o.TLS(host)); err != nil {
			return nil, err
		}
	}
	// ctx's end bounds the wait for SETTINGS (closing nc); NewClientConn's
	// own bound, a little later, is only a backstop.
	wait := time.Duration(0) // NewClientConn's default
	if d, ok := ctx.Deadline(); ok {
		wait = time.Until(d) + time.Second
	}
	cc, err := h2.NewClientConn(nc, h2.ClientOptions{IdleTimeout: p.o.Idle, SettingsTimeout: wait,
		MaxHeaderList: maxProbeHeaders})
	if err != nil {
		return nil, err
	}
	return cc, nil
}

// maxProbeHeaders bounds a probe response's header list: a health answer
// needs few fields.
const maxProbeHeaders = 16 << 10

// exchange sends the probe's request on cc and judges the answer.
func (p *H2Prober) exchange(ctx context.Context, cc *h2.ClientConn, addr, path string) error {
	scheme := "http"
	if p.o.TLS != nil {
		scheme = "https"
	}
	method, body := "GET", []byte(nil)
	if p.o.GRPC {
		method, path, body = "POST", grpcHealthPath, grpcHealthRequest(p.o.Service)
	}
	block := h2.AppendRequestHead(make([]byte, 0, 256), []byte(method), []byte(scheme), []byte(addr), []byte(path))
	block, _ = h2.AppendRequestField(block, []byte("user-agent"), []byte("levee-health"))
	if p.o.GRPC {
		block, _ = h2.AppendRequestField(block, []byte("content-type"), []byte("application/grpc"))
		block, _ = h2.AppendRequestField(block, []byte("te"), []byte("trailers"))
	}
	st, sent, err := cc.Start(block, body, true, false, ctx.Done())
	if err != nil {
		return err
	}
	defer st.Close()
	if sent < len(body) { // a backend whose windows hold no 5 + n bytes
		if err := st.Write(body[sent:], true); err != nil {
			return err
		}
	}
	status, fields, err := st.Head(0) // ctx bounds it: Start's stop
	if err != nil {
		return err
	}
	if p.o.GRPC {
		return grpcVerdict(addr, st, status, fields)
	}
	// The body is not needed: up to maxDrain is read so that the stream
	// ends cleanly; a longer one is reset by Close.
	if st.HasBody() {
		_, _ = io.Copy(io.Discard, io.LimitReader(st, maxDrain))
	}
	if status < 200 || status >= 400 {
		return &StatusError{Addr: addr, Code: status}
	}
	return nil
}

// field is the value of the first field named name ("" for none).
func field(fields []hpack.HeaderField, name string) (string, bool) {
	for _, f := range fields {
		if f.Name == name {
			return f.Value, true
		}
	}
	return "", false
}

// GRPCError is a gRPC health call that was answered, but not SERVING: a
// non-zero grpc-status (Code; NOT_FOUND, 5, for an unknown service), or
// the status the response holds (Serving).
type GRPCError struct {
	Addr    string
	Code    int    // grpc-status; -1: none came
	Message string // grpc-message, as sent
	Serving int    // HealthCheckResponse.status (0 UNKNOWN, 2 NOT_SERVING); with Code 0
}

func (e *GRPCError) Error() string {
	switch {
	case e.Code < 0:
		return fmt.Sprintf("health: probe %s: gRPC health answer without grpc-status", e.Addr)
	case e.Code != 0:
		return fmt.Sprintf("health: probe %s: grpc-status %d %q", e.Addr, e.Code, e.Message)
	}
	return fmt.Sprintf("health: probe %s: gRPC health status %s", e.Addr, servingName(e.Serving))
}

// grpcCode reads a grpc-status value; -1 for none or a malformed one.
func grpcCode(fields []hpack.HeaderField) (int, string) {
	v, ok := field(fields, "grpc-status")
	if !ok {
		return -1, ""
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return -1, ""
	}
	msg, _ := field(fields, "grpc-message")
	return n, msg
}

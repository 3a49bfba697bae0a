package forward

import (
	"errors"
	"io"
	"net/http"
	"sync/atomic"
	"time"
)

// errBodyIdle ends a response body whose backend sent no byte for
// upstream.response_header_timeout while levee waited for one.
var errBodyIdle = errors.New("forward: backend sent no body byte within response_header_timeout")

// idleBody bounds each read of a backend's response body on the net/http
// engine, as backendConn does on fasthttp: a Read that gets no byte within
// timeout closes the body (which closes the backend connection) and fails,
// so a stalled backend breaks the client's response off instead of holding
// it, and the app's slot, until the client leaves. The timer runs only
// during a Read: a slow client (no Read in progress) is not the backend's
// fault, and an idle pooled connection has no body to bound.
type idleBody struct {
	rc      io.ReadCloser
	timeout time.Duration
	timer   *time.Timer
	expired atomic.Bool
}

func newIdleBody(rc io.ReadCloser, timeout time.Duration) *idleBody {
	b := &idleBody{rc: rc, timeout: timeout}
	b.timer = time.AfterFunc(timeout, b.expire)
	b.timer.Stop()
	return b
}

func (b *idleBody) expire() {
	b.expired.Store(true)
	b.rc.Close() // unblocks the Read waiting for a byte
}

func (b *idleBody) Read(p []byte) (int, error) {
	b.timer.Reset(b.timeout)
	n, err := b.rc.Read(p)
	b.timer.Stop()
	if b.expired.Load() {
		// Whatever the closed body returned (even io.EOF), the response
		// was cut: never let it end as if complete.
		return n, errBodyIdle
	}
	return n, err
}

func (b *idleBody) Close() error {
	b.timer.Stop()
	return b.rc.Close()
}

// boundBodyReads is ReverseProxy's ModifyResponse step that wraps a
// response body in an idleBody; an upgrade's body is the connection
// itself (ReverseProxy needs its io.ReadWriteCloser) and is left alone.
func boundBodyReads(res *http.Response, timeout time.Duration) {
	if res.StatusCode == http.StatusSwitchingProtocols || res.Body == nil || res.Body == http.NoBody {
		return
	}
	res.Body = newIdleBody(res.Body, timeout)
}

package health

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// Prober checks one backend: a nil error means healthy. Probe must honour
// ctx's deadline and cancellation. Implementations are safe for concurrent
// use.
type Prober interface {
	Probe(ctx context.Context, addr, path string) error
}

// maxDrain is how much of a probe's response body is read so the connection
// can be reused; a longer body is cut and its connection closed.
const maxDrain = 4 << 10

// StatusError is a probe answered with a status outside 2xx and 3xx.
type StatusError struct {
	Addr string
	Code int
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("health: probe %s: status %d", e.Addr, e.Code)
}

// HTTPProber probes with GET http://addr{path} over keep-alive connections
// (at most one idle per backend), without a proxy and without following
// redirects: a 2xx or 3xx answer is healthy, anything else a *StatusError.
// It reads at most 4 KiB of the body. Safe for concurrent use.
type HTTPProber struct {
	client *http.Client
	tr     *http.Transport
}

var _ Prober = (*HTTPProber)(nil)

// NewHTTPProber returns an HTTPProber whose every probe (connect, request,
// response headers and drained body) ends within timeout; timeout ≤ 0 leaves
// only the context's deadline.
func NewHTTPProber(timeout time.Duration) *HTTPProber {
	tr := &http.Transport{
		Proxy:                  nil,
		DialContext:            (&net.Dialer{Timeout: max(timeout, 0), KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost:    1,
		IdleConnTimeout:        90 * time.Second,
		ResponseHeaderTimeout:  max(timeout, 0),
		DisableCompression:     true,
		MaxResponseHeaderBytes: 16 << 10,
	}
	return &HTTPProber{tr: tr, client: &http.Client{
		Transport:     tr,
		Timeout:       max(timeout, 0),
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// Probe sends one GET to http://addr{path}.
func (p *HTTPProber) Probe(ctx context.Context, addr, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return fmt.Errorf("health: probe %s: %w", addr, err)
	}
	req.Header.Set("User-Agent", "levee-health")
	resp, err := p.client.Do(req)
	if err != nil {
		return fmt.Errorf("health: probe %s: %w", addr, err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrain))
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return &StatusError{Addr: addr, Code: resp.StatusCode}
	}
	return nil
}

// CloseIdleConnections closes the kept-alive connections (and so their
// goroutines); a Checker calls it when it stops.
func (p *HTTPProber) CloseIdleConnections() { p.tr.CloseIdleConnections() }

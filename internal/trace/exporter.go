package trace

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// Exporter bounds: spans waiting (more are dropped and counted), spans per
// request, how long a batch waits to fill, and the attempts of one batch.
const (
	QueueSize     = 4096
	BatchSize     = 512
	FlushInterval = time.Second
	MaxAttempts   = 3
	firstBackoff  = 100 * time.Millisecond
)

// ExportConfig is where and how spans go; it may change while the
// exporter runs (a reload).
type ExportConfig struct {
	// URL is the OTLP/HTTP traces endpoint ({endpoint}/v1/traces); empty
	// exports nothing.
	URL         string
	Headers     map[string]string
	Timeout     time.Duration // of one attempt
	ServiceName string
}

// Stats are the exporter's lifetime counts of spans.
type Stats struct{ Exported, Dropped, Failed uint64 }

// ExporterOptions build an Exporter; zero values get defaults.
type ExporterOptions struct {
	Client *http.Client
	// Flush is how long a batch waits to fill (FlushInterval).
	Flush time.Duration
	// Sleep waits d or until ctx ends (the retry backoff); for tests.
	Sleep func(ctx context.Context, d time.Duration) error
}

// Exporter sends spans over OTLP/HTTP in protobuf, batched by one
// goroutine (Run) from a bounded queue: Enqueue never blocks, and a span
// that finds the queue full is dropped and counted. Safe for concurrent
// use. New starts nothing; Run runs until its context ends, then sends
// what is queued once, within the export timeout.
type Exporter struct {
	queue  chan *Span
	cfg    atomic.Pointer[ExportConfig]
	client *http.Client
	flush  time.Duration
	sleep  func(context.Context, time.Duration) error
	enc    encoder // Run's
	batch  []*Span // Run's

	exported, dropped, failed atomic.Uint64
}

// NewExporter returns an exporter that sends nothing until SetConfig names a URL.
func NewExporter(o ExporterOptions) *Exporter {
	x := &Exporter{queue: make(chan *Span, QueueSize), client: o.Client, flush: o.Flush, sleep: o.Sleep}
	if x.client == nil {
		// No proxy from the environment, and no redirects: an endpoint is
		// exactly what the config names.
		x.client = &http.Client{
			Transport:     &http.Transport{MaxIdleConnsPerHost: 2, IdleConnTimeout: 90 * time.Second},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	if x.flush <= 0 {
		x.flush = FlushInterval
	}
	if x.sleep == nil {
		x.sleep = sleepCtx
	}
	x.cfg.Store(&ExportConfig{})
	return x
}

// SetConfig changes where spans go from the next batch on.
func (x *Exporter) SetConfig(c ExportConfig) { x.cfg.Store(&c) }

// Stats returns the counts so far.
func (x *Exporter) Stats() Stats {
	return Stats{Exported: x.exported.Load(), Dropped: x.dropped.Load(), Failed: x.failed.Load()}
}

// Enqueue hands sp to the exporter, which frees it; with the queue full it
// is dropped (and counted) at once.
func (x *Exporter) Enqueue(sp *Span) {
	select {
	case x.queue <- sp:
	default:
		x.dropped.Add(1)
		sp.Free()
	}
}

// Run batches and sends spans until ctx ends, then sends what is left
// once. It returns when that last attempt has ended.
func (x *Exporter) Run(ctx context.Context) {
	timer := time.NewTimer(x.flush)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			x.drain()
			return
		case sp := <-x.queue:
			x.batch = append(x.batch, sp)
			if len(x.batch) >= BatchSize {
				x.send(ctx, MaxAttempts)
			}
		case <-timer.C:
			if len(x.batch) > 0 {
				x.send(ctx, MaxAttempts)
			}
			timer.Reset(x.flush)
		}
	}
}

// drain sends everything queued at shutdown, one attempt per batch; each
// attempt is bounded by the export timeout.
func (x *Exporter) drain() {
	for {
		select {
		case sp := <-x.queue:
			x.batch = append(x.batch, sp)
			if len(x.batch) < BatchSize {
				continue
			}
		default:
		}
		if len(x.batch) == 0 {
			return
		}
		x.send(context.Background(), 1)
	}
}

// send exports the batch, trying up to attempts times with a doubling
// backoff while the failure is one the OTLP spec calls retryable, then
// frees its spans.
func (x *Exporter) send(ctx context.Context, attempts int) {
	defer func() {
		for i, sp := range x.batch {
			sp.Free()
			x.batch[i] = nil
		}
		x.batch = x.batch[:0]
	}()
	cfg := x.cfg.Load()
	n := uint64(len(x.batch))
	if cfg.URL == "" {
		x.dropped.Add(n) // turned off by a reload while these waited
		return
	}
	body := x.enc.encode(cfg.ServiceName, x.batch)
	backoff := firstBackoff
	for attempt := 1; ; attempt++ {
		retry, err := x.post(ctx, cfg, body)
		if err == nil {
			x.exported.Add(n)
			return
		}
		if !retry || attempt >= attempts || x.sleep(ctx, backoff) != nil {
			x.failed.Add(n)
			return
		}
		backoff *= 2
	}
}

// post sends one request; retry says whether a failure may be retried.
func (x *Exporter) post(ctx context.Context, cfg *ExportConfig, body []byte) (retry bool, err error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, cfg.URL, bytes.NewReader(body))
	if err != nil {
		return false, err
	}
	for k, v := range cfg.Headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	resp, err := x.client.Do(req)
	if err != nil {
		return true, err
	}
	// Read a little of the answer so the connection can be reused.
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	switch c := resp.StatusCode; {
	case c >= 200 && c < 300:
		return false, nil
	case c == http.StatusTooManyRequests || c == http.StatusBadGateway ||
		c == http.StatusServiceUnavailable || c == http.StatusGatewayTimeout:
		return true, fmt.Errorf("trace: export: %s", resp.Status)
	default:
		return false, fmt.Errorf("trace: export: %s", resp.Status)
	}
}

// TracesURL is the OTLP/HTTP traces URL of an endpoint: its path with
// /v1/traces appended, as OTEL_EXPORTER_OTLP_ENDPOINT is read.
func TracesURL(endpoint string) string {
	return strings.TrimSuffix(endpoint, "/") + "/v1/traces"
}

var errStopped = errors.New("trace: exporter stopped")

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return errStopped
	}
}

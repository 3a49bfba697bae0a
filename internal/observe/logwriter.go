package observe

import (
	"bufio"
	"context"
	"io"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// LogWriter is an io.Writer for a logger that never blocks its caller: a
// line goes into a bounded in-memory queue that one goroutine writes out.
// When the queue is full (the output is slow, or blocked: a pipe no one
// reads) the line is dropped and counted, never waited for; so a stuck
// stderr costs lines, not request goroutines or the OS threads a blocking
// write would pin. Safe for concurrent use; each Write must be one whole
// line, as slog's handlers write them.
type LogWriter struct {
	out      io.Writer
	lines    chan []byte
	maxBytes int64
	maxLine  int
	queued   atomic.Int64 // bytes in lines
	dropped  atomic.Uint64

	start sync.Once
	stop  chan struct{} // closed by Close
	done  chan struct{} // closed when the drain goroutine returns
	close sync.Once
}

// LogWriterLimits bound a LogWriter's queue.
type LogWriterLimits struct {
	Lines int   // lines queued at most
	Bytes int64 // bytes queued at most
	// MaxLine truncates a longer line (its end kept as "...\n").
	MaxLine int
}

// DefaultLogWriterLimits: a few seconds of a busy log, at most 4 MiB.
var DefaultLogWriterLimits = LogWriterLimits{Lines: 8192, Bytes: 4 << 20, MaxLine: 16 << 10}

// NewLogWriter returns a LogWriter over out. It starts nothing: Start
// starts the goroutine that writes, Close stops it.
func NewLogWriter(out io.Writer, lim LogWriterLimits) *LogWriter {
	return &LogWriter{out: out, lines: make(chan []byte, max(lim.Lines, 1)), maxBytes: max(lim.Bytes, 1),
		maxLine: max(lim.MaxLine, 64), stop: make(chan struct{}), done: make(chan struct{})}
}

// Write queues a copy of p, or drops it (counted) when the queue is full
// or the writer closed. It never blocks and never fails.
func (w *LogWriter) Write(p []byte) (int, error) {
	n := len(p)
	if len(p) > w.maxLine {
		p = p[:w.maxLine]
	}
	size := int64(len(p))
	if w.closed() || w.queued.Add(size) > w.maxBytes {
		w.queued.Add(-size)
		w.dropped.Add(1)
		return n, nil
	}
	line := make([]byte, len(p), len(p)+len(truncated))
	copy(line, p)
	if len(p) < n {
		line = append(line[:len(line)-1], truncated...)
	}
	select {
	case w.lines <- line:
	default:
		w.queued.Add(-size)
		w.dropped.Add(1)
	}
	return n, nil
}

// truncated ends a line cut at MaxLine.
const truncated = "...\n"

func (w *LogWriter) closed() bool {
	select {
	case <-w.stop:
		return true
	default:
		return false
	}
}

// Dropped is the number of lines dropped so far.
func (w *LogWriter) Dropped() uint64 { return w.dropped.Load() }

// Start starts the goroutine that writes the queue out; Close ends it.
// Calls after the first do nothing.
func (w *LogWriter) Start() { w.start.Do(func() { go w.drain() }) }

// drain writes lines as they come, batched while more are queued, until
// Close; then what is queued, and returns.
func (w *LogWriter) drain() {
	defer close(w.done)
	bw := bufio.NewWriterSize(w.out, 64<<10)
	put := func(line []byte) {
		w.queued.Add(-int64(len(line)))
		_, _ = bw.Write(line) // a log's output failing has no one to tell
	}
	for {
		select {
		case line := <-w.lines:
			put(line)
			for more := true; more; {
				select {
				case line := <-w.lines:
					put(line)
				default:
					more = false
				}
			}
			_ = bw.Flush()
		case <-w.stop:
			for {
				select {
				case line := <-w.lines:
					put(line)
				default:
					_ = bw.Flush()
					return
				}
			}
		}
	}
}

// Close stops accepting lines and waits until those queued are written or
// ctx ends, whichever is first (ctx.Err() then). A writer never started is
// started to flush. If the output blocks past ctx, the goroutine is left
// blocked in its Write and returns once that Write does.
func (w *LogWriter) Close(ctx context.Context) error {
	w.Start()
	w.close.Do(func() { close(w.stop) })
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// LogWriter exports w's drops as levee_log_dropped_total. Call it once per
// Metrics.
func (m *Metrics) LogWriter(w *LogWriter) {
	m.Registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "levee_log_dropped_total", Help: "Log lines dropped because the log's output queue was full (a slow or blocked output).",
	}, func() float64 { return float64(w.Dropped()) }))
}

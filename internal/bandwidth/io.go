package bandwidth

import (
	"context"
	"io"
)

// Reader returns a reader that paces r through l for as long as ctx lives: each Read reads
// at most Chunk bytes from r and then waits for that many bytes' turn before returning
// them. Only bytes actually read are charged, and no reservation is held while r blocks
// on a slow or idle peer; since r is not read again until the bytes are paced, the
// peer is held back by its transport's flow control. When the wait fails (a
// *TooSlowError, ctx.Err(), or a deadline error) Read returns 0 and that error: the bytes
// read are dropped and the transfer must be aborted. The result hides r's WriterTo, so
// io.Copy cannot bypass the pacing. A nil l returns r. One reader serves one goroutine.
func (l *Limiter) Reader(ctx context.Context, r io.Reader) io.Reader {
	if l == nil {
		return r
	}
	return &reader{l: l, ctx: ctx, r: r}
}

// Writer returns a writer that paces w through l for as long as ctx lives: each Write is
// cut into chunks of at most Chunk bytes and each chunk waits for its turn before it is
// written. When a wait fails, Write returns the bytes written so far and the error (a
// *TooSlowError, ctx.Err(), or a deadline error); the transfer must be aborted. The
// result hides w's ReaderFrom. A nil l returns w. One writer serves one goroutine.
func (l *Limiter) Writer(ctx context.Context, w io.Writer) io.Writer {
	if l == nil {
		return w
	}
	return &writer{l: l, ctx: ctx, w: w}
}

type reader struct {
	l   *Limiter
	ctx context.Context
	r   io.Reader
	s   sleeper
}

var _ io.Reader = (*reader)(nil)

func (r *reader) Read(p []byte) (int, error) {
	if len(p) > r.l.chunk {
		p = p[:r.l.chunk]
	}
	n, err := r.r.Read(p)
	if n > 0 {
		if werr := r.l.wait(r.ctx, n, &r.s); werr != nil {
			return 0, werr
		}
	}
	return n, err
}

type writer struct {
	l   *Limiter
	ctx context.Context
	w   io.Writer
	s   sleeper
}

var _ io.Writer = (*writer)(nil)

func (w *writer) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		c := min(len(p), w.l.chunk)
		if err := w.l.wait(w.ctx, c, &w.s); err != nil {
			return written, err
		}
		n, err := w.w.Write(p[:c])
		written += n
		if err != nil {
			return written, err
		}
		if n < c {
			return written, io.ErrShortWrite
		}
		p = p[c:]
	}
	return written, nil
}

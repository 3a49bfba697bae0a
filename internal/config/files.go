package config

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/leveeproxy/levee/internal/clock"
)

// Caps on the files a config names. Each is far above any real file of its
// kind, and low enough that a wrong path (a log, a disk image) is an error
// rather than a process that runs out of memory reading it.
const (
	// MaxConfigBytes caps the config file itself.
	MaxConfigBytes = 16 << 20
	// MaxPEMBytes caps a TLS certificate chain or key file.
	MaxPEMBytes = 1 << 20
)

// DefaultFileTimeout bounds the read of one file a config names, from
// open to last byte. A local file of a few MiB takes milliseconds; only a
// stalled filesystem (a hung NFS or FUSE mount) takes this long.
const DefaultFileTimeout = 5 * time.Second

// ReadFileBounded reads the regular file at path, refusing anything else (a
// FIFO, a device such as /dev/zero, a directory, a socket), any file larger
// than max bytes, and a read that takes longer than DefaultFileTimeout. It
// is a read by a Files of its own: see Files.Read.
func ReadFileBounded(path string, max int64) ([]byte, error) {
	return new(Files).Read(context.Background(), path, max)
}

// Files reads the files a config names, each bounded three ways: it must
// be a regular file (opened with O_NONBLOCK, so a FIFO with no writer
// returns at once instead of blocking, and checked on the opened file, not
// the path, so it cannot be swapped between check and read); it may hold
// at most the caller's max bytes; and the read must end within Timeout.
//
// A read of a regular file cannot be given a deadline or interrupted, so
// each runs in a goroutine of its own, and Read stops waiting for it at the
// deadline or when ctx ends. A stalled read goes on until the filesystem
// answers, then closes its file and ends. Meanwhile a Read of the same path
// and cap waits for that same read, rather than starting another: a stalled
// file costs one goroutine and one descriptor however often it is asked
// for, so a process should read through one Files (levee serve keeps one
// for its life). Concurrent Reads of one path share one read and get their
// own copies of its bytes.
//
// Every error is an *fs.PathError naming the path; a refusal wraps
// ErrNotRegular, a *TooLargeError or a *TimeoutError. Safe for concurrent
// use; the zero value is ready, with DefaultFileTimeout and the real clock.
type Files struct {
	// Timeout bounds each read; 0 is DefaultFileTimeout.
	Timeout time.Duration
	// Clock times the deadline; nil is the real clock.
	Clock clock.Clock

	// open opens a file for reading; nil is openNonblock (tests stall it).
	open func(path string) (file, error)

	mu      sync.Mutex
	reading map[readKey]*pendingRead // reads that have not ended, stalled ones included
}

// file is what Files needs of an open file.
type file interface {
	io.Reader
	Stat() (fs.FileInfo, error)
	Close() error
}

func openNonblock(path string) (file, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
}

type readKey struct {
	path string
	max  int64
}

// pendingRead is one read in its goroutine: data and err are set before done closes.
type pendingRead struct {
	done chan struct{}
	data []byte
	err  error
}

// Read reads the file at path, at most max bytes of it, as the type's doc
// says. Read waits at most Timeout, and not past ctx.
func (f *Files) Read(ctx context.Context, path string, max int64) ([]byte, error) {
	timeout := f.Timeout
	if timeout <= 0 {
		timeout = DefaultFileTimeout
	}
	clk := f.Clock
	if clk == nil {
		clk = clock.Real{}
	}
	p, joined := f.start(path, max)
	t := clk.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.done:
		if joined {
			return slices.Clone(p.data), p.err
		}
		return p.data, p.err
	case <-t.C():
		return nil, &fs.PathError{Op: "read", Path: path, Err: &TimeoutError{After: timeout}}
	case <-ctx.Done():
		return nil, &fs.PathError{Op: "read", Path: path, Err: ctx.Err()}
	}
}

// start joins the read of path and max in progress, or starts one.
func (f *Files) start(path string, max int64) (p *pendingRead, joined bool) {
	k := readKey{path, max}
	f.mu.Lock()
	defer f.mu.Unlock()
	if p, ok := f.reading[k]; ok {
		return p, true
	}
	if f.reading == nil {
		f.reading = map[readKey]*pendingRead{}
	}
	open := f.open
	if open == nil {
		open = openNonblock
	}
	p = &pendingRead{done: make(chan struct{})}
	f.reading[k] = p
	// Not joined by anyone: it ends when the read does (see Files).
	go func() {
		p.data, p.err = readBounded(open, path, max)
		f.mu.Lock()
		delete(f.reading, k)
		f.mu.Unlock()
		close(p.done)
	}()
	return p, false
}

// readBounded opens path with open, refuses anything but a regular file of
// at most max bytes, and reads it.
func readBounded(open func(string) (file, error), path string, max int64) ([]byte, error) {
	f, err := open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if err := RegularFile(path, fi); err != nil {
		return nil, err
	}
	if fi.Size() > max {
		return nil, &fs.PathError{Op: "read", Path: path, Err: &TooLargeError{Max: max}}
	}
	// The size may grow after Stat: read at most one byte past the cap, so
	// a file that grew is caught without reading all of it.
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: path, Err: err}
	}
	if int64(len(data)) > max {
		return nil, &fs.PathError{Op: "read", Path: path, Err: &TooLargeError{Max: max}}
	}
	return data, nil
}

// TimeoutError is a Files refusal of a read that did not end in time.
type TimeoutError struct{ After time.Duration }

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("not read within %v (a stalled filesystem?)", e.After)
}

// RegularFile is nil if fi, the file at path, is a regular file, and else
// the refusal Files gives: an *fs.PathError wrapping ErrNotRegular and
// saying what the file is. It serves files that are not read whole (the
// SQLite catalog) the same rule.
func RegularFile(path string, fi fs.FileInfo) error {
	if fi.Mode().IsRegular() {
		return nil
	}
	return &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("%w (%s)", ErrNotRegular, fileKind(fi.Mode()))}
}

// ErrNotRegular is ReadFileBounded's refusal of a path that is not a regular file.
var ErrNotRegular = errors.New("not a regular file")

// TooLargeError is ReadFileBounded's refusal of a file over its cap.
type TooLargeError struct{ Max int64 }

func (e *TooLargeError) Error() string { return "larger than " + sizeName(e.Max) }

func fileKind(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&os.ModeNamedPipe != 0:
		return "a FIFO"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m&os.ModeDevice != 0:
		return "a device"
	default:
		return m.Type().String()
	}
}

func sizeName(n int64) string {
	if n >= 1<<20 && n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}

// reader is how validation reads the files a config names: through f, not
// past ctx.
type reader struct {
	ctx context.Context
	f   *Files
}

// ownReader reads through a Files of its own, without a context.
func ownReader() reader { return reader{ctx: context.Background(), f: new(Files)} }

func (r reader) read(path string, max int64) ([]byte, error) { return r.f.Read(r.ctx, path, max) }

// loadCertificate reads and parses the certificate and key files of t,
// each bounded by MaxPEMBytes (and read as ReadFileBounded does). path is
// t's field path (listen[0].tls), which an error starts with, naming the
// file at fault: listen[0].tls.cert: ....
func loadCertificate(rd reader, path string, t *TLS) (tls.Certificate, error) {
	cert, err := rd.read(t.Cert, MaxPEMBytes)
	if err != nil {
		return tls.Certificate{}, FieldError{Path: path + ".cert", Msg: err.Error()}
	}
	key, err := rd.read(t.Key, MaxPEMBytes)
	if err != nil {
		return tls.Certificate{}, FieldError{Path: path + ".key", Msg: err.Error()}
	}
	pair, err := tls.X509KeyPair(cert, key)
	if err != nil {
		return tls.Certificate{}, FieldError{Path: path, Msg: "cannot load certificate: " + err.Error()}
	}
	return pair, nil
}

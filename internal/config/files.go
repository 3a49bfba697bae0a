package config

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
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

// ReadFileBounded reads the regular file at path, refusing anything else (a
// FIFO, a device such as /dev/zero, a directory, a socket) and any file
// larger than max bytes. It opens with O_NONBLOCK, so opening a FIFO with no
// writer returns at once instead of blocking, and checks the opened file, not
// the path, so the file cannot be swapped between the check and the read.
// Every error is an *fs.PathError naming path; a refusal wraps ErrNotRegular
// or a *TooLargeError.
func ReadFileBounded(path string, max int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("%w (%s)", ErrNotRegular, fileKind(fi.Mode()))}
	}
	if fi.Size() > max {
		return nil, &fs.PathError{Op: "read", Path: path, Err: &TooLargeError{Max: max}}
	}
	// The size may grow after Stat: read at most one byte past the cap, so
	// a file that grew is caught without reading all of it.
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, &fs.PathError{Op: "read", Path: path, Err: &TooLargeError{Max: max}}
	}
	return data, nil
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

// LoadCertificate reads and parses the certificate and key files of t, each
// bounded by MaxPEMBytes. path is t's field path (listen[0].tls), which an
// error starts with, naming the file at fault: listen[0].tls.cert: ....
// Validation calls it to prove the pair loads, and the server at Listen.
func LoadCertificate(path string, t *TLS) (tls.Certificate, error) {
	cert, err := ReadFileBounded(t.Cert, MaxPEMBytes)
	if err != nil {
		return tls.Certificate{}, FieldError{Path: path + ".cert", Msg: err.Error()}
	}
	key, err := ReadFileBounded(t.Key, MaxPEMBytes)
	if err != nil {
		return tls.Certificate{}, FieldError{Path: path + ".key", Msg: err.Error()}
	}
	pair, err := tls.X509KeyPair(cert, key)
	if err != nil {
		return tls.Certificate{}, FieldError{Path: path, Msg: "cannot load certificate: " + err.Error()}
	}
	return pair, nil
}

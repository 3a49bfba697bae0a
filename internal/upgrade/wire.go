package upgrade

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// The frames of the control socket: a 4-byte big-endian length, then one
// JSON message.
type message struct {
	Kind string `json:"kind"`
	// PID is the sender's process ID (prepared, serving).
	PID int `json:"pid,omitempty"`
	// Err says why the new process gave up (failed).
	Err string `json:"err,omitempty"`
	// State is the limits' state (state), opaque here: its format and
	// version are the server's.
	State []byte `json:"state,omitempty"`
	// Report is what the old process admitted and still holds since the
	// state (report), opaque here like State.
	Report []byte `json:"report,omitempty"`
}

const (
	kindPrepared = "prepared"
	kindState    = "state"
	kindServing  = "serving"
	kindFailed   = "failed"
	kindReport   = "report"
)

// maxFrame bounds one frame: the limits' state of many apps and clients
// fits; a corrupt length does not make the reader allocate gigabytes.
const maxFrame = 256 << 20

// ctrl is one end of the control socket. Writes are serialised; one
// goroutine reads.
type ctrl struct {
	c  *net.UnixConn
	mu sync.Mutex // one frame at a time
}

func (c *ctrl) send(m message, deadline time.Time) error {
	body, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("upgrade: encode %s: %w", m.Kind, err)
	}
	if len(body) > maxFrame {
		return fmt.Errorf("upgrade: %s: %d bytes is over the frame limit", m.Kind, len(body))
	}
	frame := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(body)), uint32(len(body)))
	frame = append(frame, body...)
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = c.c.SetWriteDeadline(deadline)
	if _, err := c.c.Write(frame); err != nil {
		return fmt.Errorf("upgrade: send %s: %w", m.Kind, err)
	}
	return nil
}

// errPeerGone is io.EOF on the control socket: the other process exited
// (or closed it) before saying more.
var errPeerGone = errors.New("upgrade: the other process closed the control socket")

func (c *ctrl) recv(deadline time.Time) (message, error) {
	_ = c.c.SetReadDeadline(deadline)
	var n [4]byte
	if _, err := io.ReadFull(c.c, n[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return message{}, errPeerGone
		}
		return message{}, fmt.Errorf("upgrade: read: %w", err)
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > maxFrame {
		return message{}, fmt.Errorf("upgrade: a frame of %d bytes is over the limit", size)
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(c.c, body); err != nil {
		return message{}, fmt.Errorf("upgrade: read: %w", err)
	}
	var m message
	if err := json.Unmarshal(body, &m); err != nil {
		return message{}, fmt.Errorf("upgrade: decode: %w", err)
	}
	return m, nil
}

func (c *ctrl) close() error { return c.c.Close() }

// Package redistest runs a real redis-server for tests: on a unix socket in
// the test's temp dir, stopped by PID when the test ends. Tests that need it
// skip when the binary is missing, and fail instead when LEVEE_REQUIRE_REDIS=1
// (CI installs redis-server and sets it, so a missing binary cannot turn the
// cluster tests into silent skips).
package redistest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// startDeadline bounds how long a server may take to accept connections.
const startDeadline = 10 * time.Second

// Server is one redis-server process owned by a test.
type Server struct {
	t    testing.TB
	bin  string
	dir  string
	sock string

	mu     sync.Mutex
	proc   *os.Process     // nil while stopped
	exited <-chan struct{} // closed when proc has been waited for
	paused bool            // SIGSTOPped by Pause
}

// Start launches a redis-server for t (skipping or failing t as the package
// documentation says when there is none) and stops it when t ends.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := lookPath(t)
	// Unix socket paths are limited to ~100 bytes; t.TempDir can be longer.
	dir, err := os.MkdirTemp("", "levee-redis-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s := &Server{t: t, bin: bin, dir: dir, sock: filepath.Join(dir, "redis.sock")}
	s.Restart()
	t.Cleanup(s.Stop)
	return s
}

// lookPath finds redis-server, or skips t (fails it with LEVEE_REQUIRE_REDIS=1).
func lookPath(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("LEVEE_REQUIRE_REDIS") == "1" {
			t.Fatalf("redis-server not found and LEVEE_REQUIRE_REDIS=1: %v", err)
		}
		t.Skip("redis-server not installed (apt-get install redis-server); set LEVEE_REQUIRE_REDIS=1 to fail instead")
	}
	return bin
}

// Addr is the server's unix socket path (go-redis: Network "unix", Addr Addr()).
func (s *Server) Addr() string { return s.sock }

// Stop kills the server by PID and waits for it to exit. Idempotent.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return
	}
	_ = s.proc.Signal(syscall.SIGKILL) // a paused process dies too
	<-s.exited
	s.proc, s.paused = nil, false
	os.Remove(s.sock)
}

// Pause freezes the server with SIGSTOP, by PID: it keeps its socket and
// its state, the kernel still accepts connections on it, and nothing
// answers, as with a Redis stalled by a fork, swapping or a slow command.
// Resume (also run when the test ends, before the cleanups registered
// earlier) lets it go on.
func (s *Server) Pause() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil || s.paused {
		return
	}
	if err := s.proc.Signal(syscall.SIGSTOP); err != nil {
		s.t.Fatalf("redistest: SIGSTOP redis-server: %v", err)
	}
	s.paused = true
	s.t.Cleanup(s.Resume)
}

// Resume continues a paused server with SIGCONT. Idempotent.
func (s *Server) Resume() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil || !s.paused {
		return
	}
	_ = s.proc.Signal(syscall.SIGCONT)
	s.paused = false
}

// Restart starts the server (stopping it first if it runs), with empty
// state, and waits until it accepts connections.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	// No persistence, no TCP port: a test's server shares nothing with anyone.
	cmd := exec.Command(s.bin, "--port", "0", "--unixsocket", s.sock, "--unixsocketperm", "700",
		"--save", "", "--appendonly", "no", "--dir", s.dir, "--logfile", filepath.Join(s.dir, "redis.log"))
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("redistest: start redis-server: %v", err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }() // ends when the process does
	deadline := time.Now().Add(startDeadline)
	for {
		if err := ping(s.sock); err == nil {
			break
		} else if time.Now().After(deadline) {
			_ = cmd.Process.Signal(syscall.SIGKILL)
			<-exited
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			s.t.Fatalf("redistest: redis-server not ready after %v: %v\n%s", startDeadline, err, log)
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			s.t.Fatalf("redistest: redis-server exited at start: %v\n%s", waitErr, log)
		case <-time.After(5 * time.Millisecond):
		}
	}
	s.proc, s.exited = cmd.Process, exited
}

// ping sends a PING to a unix socket and expects +PONG.
func ping(sock string) error { return pingNet("unix", sock) }

// pingNet sends a PING in RESP and expects +PONG.
func pingNet(network, addr string) error {
	c, err := net.DialTimeout(network, addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	buf := make([]byte, 16)
	n, err := c.Read(buf)
	if err != nil {
		return err
	}
	if string(buf[:n]) != "+PONG\r\n" {
		return fmt.Errorf("unexpected reply %q", buf[:n])
	}
	return nil
}

// Package pgtest runs a real PostgreSQL for tests: initdb into a temporary
// directory, the server listening on a unix socket there only, stopped by
// PID when its owner is done. PostgreSQL refuses to run as root, so a test
// process running as root runs initdb and postgres as the "postgres" user
// (Debian's package makes it), owning the directory.
//
// A package shares one server among its tests (Shared, closed by its
// TestMain), each test with a database of its own; a test that stops or
// restarts the server starts its own (Start). Tests skip when the
// binaries are missing, and fail instead when LEVEE_REQUIRE_POSTGRES=1 (CI
// installs postgresql and sets it, so a missing binary cannot turn the
// PostgreSQL tests into silent skips).
package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Deadlines of the server's start and stop: bounds for a failure report,
// not how long they take (about a second and a few milliseconds).
const (
	startDeadline = 30 * time.Second
	stopDeadline  = 10 * time.Second
)

// User is the database superuser the servers are made with (trust auth on
// the socket: no password).
const User = "levee"

// Server is one postgres process and its data directory.
type Server struct {
	bin  string              // directory of initdb and postgres
	dir  string              // owned by the server's user: data/, the socket, the log
	cred *syscall.Credential // nil: run as this process's user

	mu     sync.Mutex
	proc   *os.Process     // nil while stopped
	exited <-chan struct{} // closed when proc has been waited for
	paused []int           // the processes Pause stopped, the postmaster first
	dbs    int             // databases made, for their names
}

// Start runs a server for t alone (skipping or failing t as the package
// documentation says when there is none) and stops it when t ends.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := lookBin(t)
	s, err := start(bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// lookBin finds the directory of initdb and postgres ($LEVEE_POSTGRES_BIN,
// the newest /usr/lib/postgresql/*/bin, or postgres on $PATH), or skips t
// (fails it with LEVEE_REQUIRE_POSTGRES=1).
func lookBin(t testing.TB) string {
	t.Helper()
	bin, err := findBin()
	if err != nil {
		if os.Getenv("LEVEE_REQUIRE_POSTGRES") == "1" {
			t.Fatalf("pgtest: %v, and LEVEE_REQUIRE_POSTGRES=1", err)
		}
		t.Skipf("pgtest: %v (apt-get install postgresql); set LEVEE_REQUIRE_POSTGRES=1 to fail instead", err)
	}
	return bin
}

func findBin() (string, error) {
	if dir := os.Getenv("LEVEE_POSTGRES_BIN"); dir != "" {
		return dir, nil
	}
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	slices.SortFunc(found, func(a, b string) int { return major(b) - major(a) })
	if len(found) > 0 {
		return filepath.Dir(found[0]), nil
	}
	if p, err := exec.LookPath("postgres"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", errors.New("no postgres binary in /usr/lib/postgresql/*/bin or on $PATH")
}

// major is the version in /usr/lib/postgresql/VERSION/bin/postgres.
func major(path string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(path))))
	return n
}

func start(bin string) (*Server, error) {
	cred, err := credential()
	if err != nil {
		return nil, err
	}
	// Unix socket paths are limited to ~100 bytes; t.TempDir can be longer.
	dir, err := os.MkdirTemp("", "levee-pg-")
	if err != nil {
		return nil, err
	}
	s := &Server{bin: bin, dir: dir, cred: cred}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("pgtest: %w", err)
		}
	}
	initdb := s.command("initdb", "-D", s.data(), "-U", User, "-A", "trust", "-E", "UTF8",
		"--locale=C", "--no-sync", "--no-instructions")
	if out, err := initdb.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("pgtest: initdb: %v\n%s", err, out)
	}
	if err := s.Restart(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// credential is the postgres user's when this process runs as root.
func credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pgtest: running as root, and postgres refuses root: need a postgres user: %w", err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func (s *Server) data() string { return filepath.Join(s.dir, "data") }

func (s *Server) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(s.bin, name), args...)
	cmd.Dir = s.dir
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	if s.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	}
	return cmd
}

// DSN is the connection string of database db on the server.
func (s *Server) DSN(db string) string {
	return fmt.Sprintf("host=%s port=5432 user=%s dbname=%s sslmode=disable", s.dir, User, db)
}

// Database makes a new, empty database and returns its DSN.
func (s *Server) Database(t testing.TB) string {
	t.Helper()
	s.mu.Lock()
	s.dbs++
	name := fmt.Sprintf("t%d", s.dbs)
	s.mu.Unlock()
	s.Exec(t, "CREATE DATABASE "+name)
	return s.DSN(name)
}

// Exec runs sql on the server's postgres database, as the superuser.
func (s *Server) Exec(t testing.TB, sql string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startDeadline)
	defer cancel()
	c, err := pgx.Connect(ctx, s.DSN("postgres"))
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	defer c.Close(context.Background())
	if _, err := c.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("pgtest: %s: %v", sql, err)
	}
}

// QueryRow runs sql on the server's postgres database, as the superuser,
// and scans its one row into dst.
func (s *Server) QueryRow(t testing.TB, sql string, dst ...any) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startDeadline)
	defer cancel()
	c, err := pgx.Connect(ctx, s.DSN("postgres"))
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	return c.QueryRow(ctx, sql).Scan(dst...)
}

// Stop shuts the server down (fast shutdown: clients are disconnected)
// and waits for it to exit, killing it by PID past stopDeadline; its data
// is kept for Restart. Idempotent.
func (s *Server) Stop() { s.stop(syscall.SIGINT) }

func (s *Server) stop(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return
	}
	s.resume() // a stopped process would take the signal only once continued
	_ = s.proc.Signal(sig)
	select {
	case <-s.exited:
	case <-time.After(stopDeadline):
		_ = s.proc.Signal(syscall.SIGKILL)
		<-s.exited
	}
	s.proc = nil
}

// Pause freezes the server with SIGSTOP, by PID: the postmaster first (so
// it forks no more), then every process it forked (the backends, each a
// session of its own, and its auxiliary processes; found by their parent
// in /proc), so nothing started by anyone else. Its socket still accepts
// connections, and nothing answers, as with a PostgreSQL stalled by a
// full disk, swapping or a stuck storage volume. Resume (also run when t
// ends) lets it go on. Linux only.
func (s *Server) Pause(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil || s.paused != nil {
		return
	}
	t.Cleanup(s.Resume)
	if err := s.proc.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("pgtest: SIGSTOP postgres: %v", err)
	}
	s.paused = []int{s.proc.Pid}
	kids, err := children(s.proc.Pid)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	for _, pid := range kids {
		if syscall.Kill(pid, syscall.SIGSTOP) == nil {
			s.paused = append(s.paused, pid)
		}
	}
}

// children are the PIDs whose parent is pid, from /proc/*/stat.
func children(pid int) ([]int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var out []int
	for _, e := range ents {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // gone since ReadDir
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, child)
		}
	}
	return out, nil
}

// Resume continues a paused server with SIGCONT. Idempotent.
func (s *Server) Resume() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resume()
}

func (s *Server) resume() {
	for _, pid := range s.paused {
		_ = syscall.Kill(pid, syscall.SIGCONT)
	}
	s.paused = nil
}

// Close stops the server at once (immediate shutdown) and removes its
// directory. Idempotent.
func (s *Server) Close() {
	s.stop(syscall.SIGQUIT)
	os.RemoveAll(s.dir)
}

// Restart starts the stopped server on its data and waits until it
// accepts connections.
func (s *Server) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		return nil
	}
	logf, err := os.OpenFile(filepath.Join(s.dir, "postgres.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	defer logf.Close()
	// No TCP, no durability: a test's server shares nothing and keeps nothing.
	cmd := s.command("postgres", "-D", s.data(), "-k", s.dir, "-p", "5432", "-c", "listen_addresses=",
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "shared_buffers=16MB", "-c", "max_connections=200", "-c", "log_min_messages=warning")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("pgtest: start postgres: %w", err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }() // ends when the process does
	ctx, cancel := context.WithTimeout(context.Background(), startDeadline)
	defer cancel()
	for {
		err := ping(ctx, s.DSN("postgres"))
		if err == nil {
			break
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(s.dir, "postgres.log"))
			return fmt.Errorf("pgtest: postgres exited at start: %v\n%s", waitErr, log)
		case <-ctx.Done():
			_ = cmd.Process.Signal(syscall.SIGQUIT)
			<-exited
			log, _ := os.ReadFile(filepath.Join(s.dir, "postgres.log"))
			return fmt.Errorf("pgtest: postgres not ready after %v: %v\n%s", startDeadline, err, log)
		case <-time.After(10 * time.Millisecond):
		}
	}
	s.proc, s.exited = cmd.Process, exited
	return nil
}

func ping(ctx context.Context, dsn string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	return c.Close(ctx)
}

// Shared is one server for a package's tests, started on first use. The
// zero value is ready; the package's TestMain calls Close after m.Run.
type Shared struct {
	mu  sync.Mutex
	s   *Server
	err error
}

// Server returns the shared server, starting it if need be (skipping or
// failing t as the package documentation says when there is none).
func (sh *Shared) Server(t testing.TB) *Server {
	t.Helper()
	bin := lookBin(t)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.s == nil && sh.err == nil {
		sh.s, sh.err = start(bin)
	}
	if sh.err != nil {
		t.Fatal(sh.err)
	}
	return sh.s
}

// Database makes a new database on the shared server and returns its DSN.
func (sh *Shared) Database(t testing.TB) string {
	t.Helper()
	return sh.Server(t).Database(t)
}

// Close stops the shared server, if it was started.
func (sh *Shared) Close() {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.s != nil {
		sh.s.Close()
	}
}

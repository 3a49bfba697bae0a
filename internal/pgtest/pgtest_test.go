package pgtest

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

var shared Shared

func TestMain(m *testing.M) {
	code := m.Run()
	shared.Close()
	os.Exit(code)
}

// Each database is new and empty, on one server; a server of its own
// stops and restarts with its data.
func TestDatabasesAndRestart(t *testing.T) {
	ctx := context.Background()
	a, b := shared.Database(t), shared.Database(t)
	if a == b {
		t.Fatalf("two databases share a DSN: %s", a)
	}
	run(t, a, "CREATE TABLE x (v int)")
	run(t, b, "CREATE TABLE x (v int)") // b does not have a's table

	s := Start(t)
	dsn := s.Database(t)
	run(t, dsn, "CREATE TABLE kept (v int); INSERT INTO kept VALUES (7)")
	s.Stop()
	if err := ping(ctx, dsn); err == nil {
		t.Fatal("a stopped server answered")
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var v int
	if err := c.QueryRow(ctx, "SELECT v FROM kept").Scan(&v); err != nil || v != 7 {
		t.Errorf("after a restart: %d %v", v, err)
	}
}

func run(t *testing.T, dsn, sql string) {
	t.Helper()
	c, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	if _, err := c.Exec(context.Background(), sql); err != nil {
		t.Fatal(err)
	}
}

// A paused server keeps its connections and answers none of them, through
// a connection opened before the pause (its backend is frozen too) or
// after; once resumed, both are served.
func TestPauseFreezesEveryBackend(t *testing.T) {
	ctx := context.Background()
	s := Start(t)
	dsn := s.Database(t)
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	s.Pause(t)
	qctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := c.Exec(qctx, "SELECT 1"); err == nil {
		t.Fatal("a backend of a paused server answered")
	}
	if err := ping(qctx, dsn); err == nil {
		t.Fatal("a paused server took a new connection")
	}
	s.Resume()
	if err := ping(ctx, dsn); err != nil {
		t.Fatalf("after Resume: %v", err)
	}
}

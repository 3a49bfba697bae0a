package pgstore

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/leveeproxy/levee/internal/catalog"
	"github.com/leveeproxy/levee/internal/catalog/storetest"
	"github.com/leveeproxy/levee/internal/leaktest"
	"github.com/leveeproxy/levee/internal/pgtest"
)

// pg is the package's server; each test makes a database on it.
var pg pgtest.Shared

func TestMain(m *testing.M) {
	code := m.Run()
	pg.Close()
	os.Exit(code)
}

// waitTimeout bounds every wait: a deadline for a failure report, not a
// measure of how fast things happen.
const waitTimeout = 10 * time.Second

// newStore opens a store on a new database, its schema made.
func newStore(t *testing.T, dsn string, o Options) *Store {
	t.Helper()
	s, err := Open(dsn, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Init(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestStore runs the behaviour every store shares over PostgreSQL: the
// writer and the reader are two pools on one database, as an import and
// a levee serve are.
func TestStore(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) (storetest.Store, storetest.Store) {
			dsn := pg.Database(t)
			w := newStore(t, dsn, Options{Conns: 1})
			r, err := Open(dsn, Options{Conns: 2})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { r.Close() })
			if err := r.Check(context.Background()); err != nil {
				t.Fatal(err)
			}
			return w, r
		},
		DropChanges: func(t *testing.T, w storetest.Store, upTo int64) {
			if _, err := w.(*Store).pool.Exec(context.Background(), `DELETE FROM changes WHERE version <= $1`, upTo); err != nil {
				t.Fatal(err)
			}
		},
	})
}

func TestCheckAndInit(t *testing.T) {
	ctx := context.Background()
	dsn := pg.Database(t)
	s, err := Open(dsn, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Check(ctx); err == nil || !strings.Contains(err.Error(), "holds no levee catalog") {
		t.Errorf("Check of an empty database: %v", err)
	}
	for range 2 { // Init is idempotent
		if err := s.Init(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Check(ctx); err != nil {
		t.Errorf("Check after Init: %v", err)
	}
	if _, err := s.pool.Exec(ctx, `UPDATE meta SET value = '99' WHERE key = 'schema_version'`); err != nil {
		t.Fatal(err)
	}
	if err := s.Check(ctx); err == nil || !strings.Contains(err.Error(), "schema version 99; this levee reads 1") {
		t.Errorf("Check of a newer schema: %v", err)
	}
	if err := s.Init(ctx); err == nil || !strings.Contains(err.Error(), "newer than this levee's") {
		t.Errorf("Init of a newer schema: %v", err)
	}
	if err := ParseDSN("postgres://u:secret@[bad"); err == nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("a bad DSN: %v (must be refused without its password)", err)
	}
}

// Warm opens every connection of the pool up front and keeps them: a
// cold wave right after a start finds them open, and reads over them dial
// nothing more.
func TestWarmOpensThePool(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, pg.Database(t), Options{Conns: 3})
	if n := s.Warm(ctx); n != 3 {
		t.Fatalf("Warm opened %d connections, want 3", n)
	}
	before := s.pool.Stat()
	if before.TotalConns() != 3 || before.IdleConns() != 3 {
		t.Fatalf("after Warm: %d open, %d idle; want 3 and 3", before.TotalConns(), before.IdleConns())
	}
	for range 20 {
		if _, err := s.ForHost(ctx, "nobody.example"); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.pool.Stat().NewConnsCount() - before.NewConnsCount(); n != 0 {
		t.Errorf("reads after Warm dialled %d connections, want 0", n)
	}
}

// A write notifies the listener as it commits; a listener whose
// connection is killed reconnects (telling the watcher once, for what it
// may have missed) and hears the next write.
func TestListenHearsWritesAndReconnects(t *testing.T) {
	leaktest.Check(t)
	ctx, cancel := context.WithCancel(context.Background())
	srv := pg.Server(t)
	dsn := srv.Database(t)
	w := newStore(t, dsn, Options{Conns: 1})
	r, err := Open(dsn, Options{Conns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	wake := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() { defer close(done); r.Listen(ctx, wake) }()
	defer func() { cancel(); <-done }()
	expectWake(t, wake, "the first connection")

	put := func(name string) {
		t.Helper()
		apps := storetest.Apps(t, "x.jsonl", `{"name":"`+name+`","hosts":["`+name+`.example"],"backends":["127.0.0.1:1"]}`)
		if _, err := w.Put(ctx, apps, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	put("a")
	expectWake(t, wake, "a write")

	srv.Exec(t, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'levee catalog listener'`)
	expectWake(t, wake, "the reconnection")
	// The wake may have come from the dying connection's last breath:
	// wait until the new one listens before writing.
	waitListening(t, srv)
	put("b")
	expectWake(t, wake, "a write after the reconnection")
}

func expectWake(t *testing.T, wake <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-wake:
	case <-time.After(waitTimeout):
		t.Fatalf("no wake for %s within %v", what, waitTimeout)
	}
}

func waitListening(t *testing.T, srv *pgtest.Server) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		var n int
		err := srv.QueryRow(t, `SELECT COUNT(*) FROM pg_stat_activity WHERE application_name = 'levee catalog listener' AND query LIKE 'LISTEN%'`, &n)
		if err == nil && n == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("listener not back within %v: %d %v", waitTimeout, n, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// With the database stopped, every call fails as catalog.ErrUnavailable
// within its context's deadline, then at once while the store backs off;
// once the database is back the pool reconnects and calls succeed.
func TestUnreachableIsUnavailableThenRecovers(t *testing.T) {
	leaktest.Check(t)
	srv := pgtest.Start(t)
	s := newStore(t, srv.Database(t), Options{Conns: 2})
	ctx := context.Background()
	if _, err := s.ForHost(ctx, "a.example"); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	lctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := s.ForHost(lctx, "a.example")
	if !errors.Is(err, catalog.ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
	if d := time.Since(start); d > waitTimeout {
		t.Fatalf("a call on a stopped database took %v", d)
	}
	if _, err := s.Version(ctx); !errors.Is(err, catalog.ErrUnavailable) {
		t.Errorf("Version: %v", err)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(waitTimeout)
	for {
		_, err := s.ForHost(ctx, "a.example")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not back %v after the restart: %v", waitTimeout, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

package pgstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/leveeproxy/levee/internal/catalog"
	"github.com/leveeproxy/levee/internal/clock"
)

// Backoff of a store that found its database unreachable: calls fail at
// once (catalog.ErrUnavailable) for a delay doubling from minBackoff to
// maxBackoff, reset by the first call that succeeds; the listener waits
// the same way between reconnects.
const (
	minBackoff = 50 * time.Millisecond
	maxBackoff = 2 * time.Second
)

// DefaultConnectTimeout bounds a connection attempt when the DSN sets no
// connect_timeout: a database that accepts and never answers holds a pool
// slot (not a request: each call keeps to its context) that long at most.
const DefaultConnectTimeout = 5 * time.Second

// Store is a catalog in a PostgreSQL database. It is safe for concurrent
// use. Open connects to nothing; the pool connects on first use and
// reconnects on its own after the database comes back.
type Store struct {
	catalog.Writer // Put and Delete, over write; a write notifies as it commits
	pool           *pgxpool.Pool
	listen         *pgx.ConnConfig // the listener's, copied per connection
	clk            clock.Clock
	log            *slog.Logger

	mu        sync.Mutex
	downUntil time.Time     // calls before it fail at once
	delay     time.Duration // the next backoff
}

var (
	_ catalog.Store    = (*Store)(nil)
	_ catalog.Notifier = (*Store)(nil)
)

// Options tune Open.
type Options struct {
	// Conns is the most connections open at once (the loader's concurrency
	// plus one for the watcher), beside the listener's; 0 means 4.
	Conns int
	Clock clock.Clock  // nil: the real one
	Log   *slog.Logger // the listener's reconnects; nil: discarded
}

// ParseDSN checks a DSN (a postgres:// URL or key=value pairs) as Open
// would, without connecting. Its errors do not repeat a password.
func ParseDSN(dsn string) error {
	_, err := pgxpool.ParseConfig(dsn)
	return err
}

// Open returns a store on the database of dsn, without connecting (see
// Check). Close it when done.
func Open(dsn string, o Options) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("pgstore: %w", err)
	}
	cfg.MaxConns = int32(cmp.Or(o.Conns, 4))
	cfg.MinConns = 0
	cc := cfg.ConnConfig
	cc.ConnectTimeout = cmp.Or(cc.ConnectTimeout, DefaultConnectTimeout)
	if cc.RuntimeParams["application_name"] == "" {
		cc.RuntimeParams["application_name"] = "levee"
	}
	listen := cc.Copy()
	listen.RuntimeParams["application_name"] = "levee catalog listener"
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, fmt.Errorf("pgstore: %w", err)
	}
	s := &Store{pool: pool, listen: listen, clk: o.Clock, log: o.Log, delay: minBackoff}
	s.Writer.Run = s.write
	if s.clk == nil {
		s.clk = clock.Real{}
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	return s, nil
}

// Close closes every connection of the pool.
func (s *Store) Close() error {
	s.pool.Close()
	return nil
}

// Check connects and verifies that the database holds a levee catalog of
// the schema this levee reads. An unreachable database is
// catalog.ErrUnavailable.
func (s *Store) Check(ctx context.Context) error {
	if err := s.ready(); err != nil {
		return err
	}
	v, err := s.schemaVersion(ctx, s.pool)
	if err := s.fail(err); err != nil {
		return err
	}
	switch {
	case v == 0:
		return errors.New("pgstore: the database holds no levee catalog (levee catalog import makes one)")
	case v != schemaVersion:
		return fmt.Errorf("pgstore: the catalog has schema version %d; this levee reads %d", v, schemaVersion)
	}
	return nil
}

// Warm opens the pool's connections now, so that the first wave of cold
// hosts after a start does not pay a connection (and its password
// exchange) each on the request path. It is best effort: it stops at the
// first connection that fails or when ctx ends, and keeps what it opened.
func (s *Store) Warm(ctx context.Context) int {
	held := make([]*pgxpool.Conn, 0, s.pool.Config().MaxConns)
	for range cap(held) {
		c, err := s.pool.Acquire(ctx)
		if err != nil {
			break
		}
		held = append(held, c)
	}
	for _, c := range held {
		c.Release()
	}
	return len(held)
}

type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// schemaVersion is the catalog's schema version, 0 for none.
func (s *Store) schemaVersion(ctx context.Context, q querier) (int, error) {
	var exists bool
	if err := q.QueryRow(ctx, `SELECT to_regclass('meta') IS NOT NULL`).Scan(&exists); err != nil || !exists {
		return 0, err
	}
	var v string
	switch err := q.QueryRow(ctx, `SELECT value FROM meta WHERE key = 'schema_version'`).Scan(&v); {
	case errors.Is(err, pgx.ErrNoRows):
		return 0, nil
	case err != nil:
		return 0, err
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("schema_version %q is not a number", v)
	}
	return n, nil
}

// Init makes the catalog's tables, or brings an older schema to this
// levee's, in one transaction; then the catalog is ready for writes.
func (s *Store) Init(ctx context.Context) error {
	return s.tx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, schemaLock); err != nil {
			return err
		}
		v, err := s.schemaVersion(ctx, tx)
		if err != nil {
			return err
		}
		if v > schemaVersion {
			return fmt.Errorf("the catalog has schema version %d, newer than this levee's %d", v, schemaVersion)
		}
		if v == 0 {
			if _, err := tx.Exec(ctx, `CREATE TABLE meta (key text PRIMARY KEY, value text NOT NULL)`); err != nil {
				return err
			}
		}
		for _, m := range migrations[v:] {
			for _, q := range m {
				if _, err := tx.Exec(ctx, q); err != nil {
					return err
				}
			}
		}
		_, err = tx.Exec(ctx, `INSERT INTO meta (key, value) VALUES ('schema_version', $1)
			ON CONFLICT (key) DO UPDATE SET value = excluded.value`, strconv.Itoa(schemaVersion))
		return err
	})
}

// tx runs fn in a read-write transaction and commits it.
func (s *Store) tx(ctx context.Context, fn func(pgx.Tx) error) error {
	if err := s.ready(); err != nil {
		return err
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return s.fail(err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit: a no-op
	if err := fn(tx); err != nil {
		return s.fail(err)
	}
	return s.fail(tx.Commit(ctx))
}

// ready refuses a call at once while the store backs off an unreachable
// database.
func (s *Store) ready() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if until := s.downUntil; s.clk.Now().Before(until) {
		return fmt.Errorf("pgstore: %w: the database was unreachable; trying again at %s", catalog.ErrUnavailable, until.Format(time.TimeOnly))
	}
	return nil
}

// fail wraps err (nil for success) as the store's, marking an unreachable
// database catalog.ErrUnavailable and backing off from it.
func (s *Store) fail(err error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case err == nil:
		s.downUntil, s.delay = time.Time{}, minBackoff
		return nil
	case errors.Is(err, context.Canceled): // the caller gave up: says nothing of the database
		return fmt.Errorf("pgstore: %w", err)
	case !unreachable(err):
		return fmt.Errorf("pgstore: %w", err)
	}
	s.downUntil = s.clk.Now().Add(s.delay)
	s.delay = min(2*s.delay, maxBackoff)
	return fmt.Errorf("pgstore: %w: %w", catalog.ErrUnavailable, err)
}

// unreachable says err is about the connection, not the query: anything
// but an error the server reported, and the server's own for a lost
// connection, a shutdown or too many clients.
func unreachable(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return !errors.Is(err, pgx.ErrNoRows) && !errors.Is(err, pgx.ErrTxClosed)
	}
	return strings.HasPrefix(pe.Code, "08") || strings.HasPrefix(pe.Code, "57P") || pe.Code == "53300"
}

// recordsSQL selects apps with all their routes, one row an app.
const recordsSQL = `SELECT a.name, a.config, a.version,
	array_agg(DISTINCT r.host ORDER BY r.host), array_agg(DISTINCT r.path ORDER BY r.path)
	FROM apps a JOIN routes r ON r.app = a.name
	WHERE `

// ForHost returns the apps claiming host exactly or by a wildcard, in one
// statement (so one consistent read).
func (s *Store) ForHost(ctx context.Context, host string) ([]catalog.Record, error) {
	cands := append([]string{host}, catalog.WildcardsOf(host)...)
	return s.records(ctx, recordsSQL+`a.name IN (SELECT app FROM routes WHERE host = ANY($1))
		GROUP BY a.name ORDER BY a.name`, cands)
}

// Apps returns the named apps that exist.
func (s *Store) Apps(ctx context.Context, names []string) ([]catalog.Record, error) {
	return s.records(ctx, recordsSQL+`a.name = ANY($1) GROUP BY a.name ORDER BY a.name`, names)
}

func (s *Store) records(ctx context.Context, q string, arg []string) ([]catalog.Record, error) {
	if err := s.ready(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, q, arg)
	if err != nil {
		return nil, s.fail(err)
	}
	var out []catalog.Record
	var r catalog.Record
	_, err = pgx.ForEachRow(rows, []any{&r.Name, &r.Config, &r.Version, &r.Hosts, &r.Paths}, func() error {
		out = append(out, r)
		r = catalog.Record{} // the next row scans into new slices
		return nil
	})
	if err != nil {
		return nil, s.fail(err)
	}
	return out, s.fail(nil)
}

// Changes returns up to limit changes after version, oldest first, in one
// statement: the oldest kept and the rows read in one snapshot.
func (s *Store) Changes(ctx context.Context, after int64, limit int) ([]catalog.Change, error) {
	if err := s.ready(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT o.oldest, c.version, c.app, c.hosts, c.at
		FROM (SELECT MIN(version) AS oldest FROM changes) o
		LEFT JOIN LATERAL (SELECT version, app, hosts, at FROM changes
			WHERE version > $1 ORDER BY version LIMIT $2) c ON true
		ORDER BY c.version`, after, limit)
	if err != nil {
		return nil, s.fail(err)
	}
	var out []catalog.Change
	var oldest, version *int64
	var app *string
	var hosts []string
	var at *time.Time
	_, err = pgx.ForEachRow(rows, []any{&oldest, &version, &app, &hosts, &at}, func() error {
		if version != nil {
			out = append(out, catalog.Change{Version: *version, App: *app, Hosts: hosts, At: *at})
			hosts = nil
		}
		return nil
	})
	if err != nil {
		return nil, s.fail(err)
	}
	if oldest != nil && *oldest > after+1 && after > 0 {
		return nil, catalog.ErrChangesLost
	}
	return out, s.fail(nil)
}

// Version is the latest change's version (the apps' when every change was
// pruned; 0 for none).
func (s *Store) Version(ctx context.Context) (int64, error) {
	if err := s.ready(); err != nil {
		return 0, err
	}
	var v int64
	err := s.pool.QueryRow(ctx, `SELECT COALESCE((SELECT MAX(version) FROM changes), (SELECT MAX(version) FROM apps), 0)`).Scan(&v)
	return v, s.fail(err)
}

package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/leveeproxy/levee/internal/catalog"
	"github.com/leveeproxy/levee/internal/config"
	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// Store is a catalog file opened for reading (Open) or writing (Create):
// Put and Delete (catalog.Writer) write by catalog's rules.
// It is safe for concurrent use.
type Store struct {
	catalog.Writer // Put and Delete, over write
	db             *sql.DB
	path           string

	mu      sync.Mutex
	forHost map[int]*sql.Stmt // by number of candidate hosts
}

var _ catalog.Store = (*Store)(nil)

// Options tune Open.
type Options struct {
	// Conns is the most read-only connections open at once (the loader's
	// concurrency plus one for the watcher); 0 means 4.
	Conns int
}

// mmapSize is how much of the file each reading connection maps. A cold
// app's lookup then reads the file's pages where they are, instead of
// copying each through pread into a page cache per connection: 40% less
// CPU per cold load at 200,000 apps (BenchmarkCatalogColdLoad). It is
// address space, not memory; a larger file is read as before past it.
const mmapSize = 1 << 30

// Open opens an existing catalog file read-only: levee serve never writes
// it. The file must have been made by Create.
func Open(path string, o Options) (*Store, error) {
	if err := checkFiles(path, false); err != nil {
		return nil, err
	}
	if o.Conns <= 0 {
		o.Conns = 4
	}
	db, err := sql.Open("sqlite", dsn(path, "mode=ro", "_pragma=query_only(1)", "_pragma=busy_timeout(5000)",
		"_pragma=mmap_size("+strconv.Itoa(mmapSize)+")"))
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: %w", err)
	}
	db.SetMaxOpenConns(o.Conns)
	db.SetMaxIdleConns(o.Conns)
	s := &Store{db: db, path: path, forHost: map[int]*sql.Stmt{}}
	s.Writer.Run = s.write
	if err := s.checkSchema(); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// Create opens the catalog file at path for writing, making it (and its
// schema) if needed, in WAL mode.
func Create(path string) (*Store, error) {
	if err := checkFiles(path, true); err != nil {
		return nil, err
	}
	db, err := sql.Open("sqlite", dsn(path, "_pragma=journal_mode(WAL)", "_pragma=busy_timeout(10000)",
		"_pragma=synchronous(NORMAL)", "_txlock=immediate"))
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: %w", err)
	}
	db.SetMaxOpenConns(1) // SQLite has one writer; more connections would only wait
	for _, q := range schema {
		if _, err := db.Exec(q); err != nil {
			db.Close()
			return nil, fmt.Errorf("sqlitestore: create %s: %w", path, err)
		}
	}
	s := &Store{db: db, path: path, forHost: map[int]*sql.Stmt{}}
	s.Writer.Run = s.write
	if err := s.checkSchema(); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// checkFiles refuses a catalog, or the -wal or -shm file SQLite keeps
// beside it, that is there but is not a regular file: SQLite would block
// opening a FIFO for good, and read a device as if it held a database. The
// catalog itself must exist unless create. (A file swapped after the check
// is the operator's own doing; the path is theirs.)
func checkFiles(path string, create bool) error {
	for i, p := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(p)
		if errors.Is(err, fs.ErrNotExist) && (create || i > 0) {
			continue
		}
		if err == nil {
			err = config.RegularFile(p, fi)
		}
		if err != nil {
			return fmt.Errorf("sqlitestore: %w", err)
		}
	}
	return nil
}

func dsn(path string, params ...string) string {
	return "file:" + (&url.URL{Path: path}).EscapedPath() + "?" + strings.Join(params, "&")
}

func (s *Store) checkSchema() error {
	var v string
	err := s.db.QueryRow(`SELECT value FROM meta WHERE key = 'schema_version'`).Scan(&v)
	if err != nil {
		return fmt.Errorf("sqlitestore: %s is not a levee catalog: %w", s.path, err)
	}
	if v != schemaVersion {
		return fmt.Errorf("sqlitestore: %s has schema version %s; this levee reads %s", s.path, v, schemaVersion)
	}
	return nil
}

// Close closes the file.
func (s *Store) Close() error {
	s.mu.Lock()
	for _, st := range s.forHost {
		st.Close()
	}
	s.mu.Unlock()
	return s.db.Close()
}

// ForHost returns the apps claiming host exactly or by a wildcard, in one
// statement (so one consistent read) prepared once per number of labels.
func (s *Store) ForHost(ctx context.Context, host string) ([]catalog.Record, error) {
	cands := append([]string{host}, catalog.WildcardsOf(host)...)
	st, err := s.forHostStmt(len(cands))
	if err != nil {
		return nil, err
	}
	rows, err := st.QueryContext(ctx, anys(cands)...)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: %w", err)
	}
	defer rows.Close()
	var out []catalog.Record
	for rows.Next() {
		var name, host, path string
		var cfg []byte
		var version int64
		if err := rows.Scan(&name, &cfg, &version, &host, &path); err != nil {
			return nil, fmt.Errorf("sqlitestore: %w", err)
		}
		if len(out) == 0 || out[len(out)-1].Name != name {
			out = append(out, catalog.Record{Name: name, Config: cfg, Version: version})
		}
		addRoute(&out[len(out)-1], host, path)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlitestore: %w", err)
	}
	return out, nil
}

// forHostStmt returns the ForHost statement for n candidate hosts.
func (s *Store) forHostStmt(n int) (*sql.Stmt, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.forHost[n]; st != nil {
		return st, nil
	}
	st, err := s.db.Prepare(`SELECT a.name, a.config, a.version, r.host, r.path
		FROM apps a JOIN routes r ON r.app = a.name
		WHERE a.name IN (SELECT app FROM routes WHERE host IN (` + marks(n) + `))
		ORDER BY a.name, r.host, r.path`)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: %w", err)
	}
	s.forHost[n] = st
	return st, nil
}

func addRoute(r *catalog.Record, host, path string) {
	if !slices.Contains(r.Hosts, host) {
		r.Hosts = append(r.Hosts, host)
	}
	if !slices.Contains(r.Paths, path) {
		r.Paths = append(r.Paths, path)
	}
}

// Apps returns the named apps that exist.
func (s *Store) Apps(ctx context.Context, names []string) ([]catalog.Record, error) {
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: %w", err)
	}
	defer tx.Rollback()
	var out []catalog.Record
	for chunk := range slices.Chunk(names, 500) { // SQLite bounds the parameters of one statement
		recs, err := apps(ctx, tx, chunk)
		if err != nil {
			return nil, err
		}
		out = append(out, recs...)
	}
	return out, nil
}

type querier interface {
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
}

func apps(ctx context.Context, q querier, names []string) ([]catalog.Record, error) {
	in := marks(len(names))
	rows, err := q.QueryContext(ctx, `SELECT name, config, version FROM apps WHERE name IN (`+in+`) ORDER BY name`, anys(names)...)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: %w", err)
	}
	var out []catalog.Record
	byName := map[string]int{}
	for rows.Next() {
		var r catalog.Record
		if err := rows.Scan(&r.Name, &r.Config, &r.Version); err != nil {
			rows.Close()
			return nil, fmt.Errorf("sqlitestore: %w", err)
		}
		byName[r.Name] = len(out)
		out = append(out, r)
	}
	if err := rows.Close(); err != nil {
		return nil, fmt.Errorf("sqlitestore: %w", err)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlitestore: %w", err)
	}
	rows, err = q.QueryContext(ctx, `SELECT app, host, path FROM routes WHERE app IN (`+in+`) ORDER BY app, host, path`, anys(names)...)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var app, host, path string
		if err := rows.Scan(&app, &host, &path); err != nil {
			return nil, fmt.Errorf("sqlitestore: %w", err)
		}
		if i, ok := byName[app]; ok {
			addRoute(&out[i], host, path)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlitestore: %w", err)
	}
	return out, nil
}

// Changes returns up to limit changes after version, oldest first.
func (s *Store) Changes(ctx context.Context, after int64, limit int) ([]catalog.Change, error) {
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: %w", err)
	}
	defer tx.Rollback()
	var oldest sql.NullInt64
	if err := tx.QueryRowContext(ctx, `SELECT MIN(version) FROM changes`).Scan(&oldest); err != nil {
		return nil, fmt.Errorf("sqlitestore: %w", err)
	}
	if oldest.Valid && oldest.Int64 > after+1 && after > 0 {
		return nil, catalog.ErrChangesLost
	}
	rows, err := tx.QueryContext(ctx, `SELECT version, app, hosts, at FROM changes WHERE version > ? ORDER BY version LIMIT ?`, after, limit)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: %w", err)
	}
	defer rows.Close()
	var out []catalog.Change
	for rows.Next() {
		var c catalog.Change
		var hosts string
		var at int64
		if err := rows.Scan(&c.Version, &c.App, &hosts, &at); err != nil {
			return nil, fmt.Errorf("sqlitestore: %w", err)
		}
		if hosts != "" {
			c.Hosts = strings.Split(hosts, "\n")
		}
		c.At = time.Unix(0, at)
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlitestore: %w", err)
	}
	return out, nil
}

// Version is the latest change's version.
func (s *Store) Version(ctx context.Context) (int64, error) {
	var v sql.NullInt64
	if err := s.db.QueryRowContext(ctx, `SELECT MAX(version) FROM changes`).Scan(&v); err != nil {
		return 0, fmt.Errorf("sqlitestore: %w", err)
	}
	if !v.Valid {
		// All changes pruned or none made: the apps' own versions say how far we are.
		if err := s.db.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM apps`).Scan(&v); err != nil {
			return 0, fmt.Errorf("sqlitestore: %w", err)
		}
	}
	return v.Int64, nil
}

func marks(n int) string { return strings.TrimSuffix(strings.Repeat("?,", n), ",") }

func anys(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}
